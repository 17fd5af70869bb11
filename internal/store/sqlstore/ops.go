package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const opCols = `id, session_id, kind, state, step, epoch, idempotency_key, attempts, error, claimed_by,
	lease_until, created_at, updated_at`

func scanOp(r scanner) (domain.Op, error) {
	var o domain.Op
	var kind, state string
	var lease, created, updated int64
	err := r.Scan(&o.ID, &o.SessionID, &kind, &state, &o.Step, &o.Epoch, &o.IdempotencyKey, &o.Attempts,
		&o.Error, &o.ClaimedBy, &lease, &created, &updated)
	if err != nil {
		return domain.Op{}, err
	}
	o.Kind, o.State = domain.OpKind(kind), domain.OpState(state)
	o.LeaseUntil, o.CreatedAt, o.UpdatedAt = fromMicros(lease), fromMicros(created), fromMicros(updated)
	return o, nil
}

func validOpKind(k domain.OpKind) bool {
	switch k {
	case domain.OpCreate, domain.OpResume, domain.OpEvict, domain.OpDestroy, domain.OpMove, domain.OpRecover, domain.OpSnapshot, domain.OpExpire:
		return true
	}
	return false
}

// errRetry asks EnqueueOp to try again after a lost race.
var errRetry = errors.New("retry")

// EnqueueOp implements store.Ops. Only ID, SessionID, Kind, IdempotencyKey
// and CreatedAt (now when zero) are taken from op. An op that failed or was
// superseded gives its idempotency key back: the same key then inserts a new
// op (a partial unique index covers only pending, running and succeeded ops).
func (s *Store) EnqueueOp(ctx context.Context, op domain.Op, supersede bool) (domain.Op, error) {
	if op.ID == "" || op.SessionID == "" {
		return domain.Op{}, errors.New("enqueue op: op id and session id are required")
	}
	if !validOpKind(op.Kind) {
		return domain.Op{}, fmt.Errorf("enqueue op for %s: unknown kind %q", op.SessionID, op.Kind)
	}
	for range 5 {
		out, err := s.enqueueOnce(ctx, op, supersede)
		if s.isUnique(err) {
			// Lost a race on a unique index: find out which, outside the
			// failed transaction.
			out, err = s.whyEnqueueFailed(ctx, op, supersede)
		}
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			return domain.Op{}, fmt.Errorf("enqueue %s op for %s: %w", op.Kind, op.SessionID, err)
		}
		return out, nil
	}
	return domain.Op{}, fmt.Errorf("enqueue %s op for %s: %w: kept losing races", op.Kind, op.SessionID, store.ErrConflict)
}

func (s *Store) enqueueOnce(ctx context.Context, op domain.Op, supersede bool) (out domain.Op, err error) {
	at := micros(orNow(op.CreatedAt))
	err = s.inTx(ctx, func(tx execer) error {
		if op.IdempotencyKey != "" {
			out, err = opByKey(ctx, tx, op.SessionID, op.IdempotencyKey)
			if err == nil || !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = $1`, op.SessionID).Scan(&one)
		if isNoRows(err) {
			return fmt.Errorf("session: %w", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if supersede {
			err = supersedeActive(ctx, tx, op, at)
		} else {
			err = noActiveOp(ctx, tx, op.SessionID)
		}
		if errors.Is(err, store.ErrOpInProgress) && op.IdempotencyKey != "" {
			// A concurrent call with the same key may have committed its op
			// after the lookup above; this statement sees it.
			if byKey, kerr := opByKey(ctx, tx, op.SessionID, op.IdempotencyKey); kerr == nil {
				out = byKey
				return nil
			}
		}
		if err != nil {
			return err
		}
		out, err = scanOp(tx.QueryRowContext(ctx, `INSERT INTO session_ops (`+opCols+`)
			VALUES ($1, $2, $3, $4, '', 0, $5, 0, '', '', 0, $6, $6) RETURNING `+opCols,
			op.ID, op.SessionID, string(op.Kind), string(domain.OpPending), op.IdempotencyKey, at))
		return err
	})
	return out, err
}

// supersedeActive marks the session's pending or running op superseded,
// unless it holds op's idempotency key: a concurrent call with the same key
// committed it after our lookup, and the insert that follows then fails on
// the one-active index and returns that op instead.
func supersedeActive(ctx context.Context, db execer, op domain.Op, at int64) error {
	q, args := `UPDATE session_ops SET state = 'superseded', updated_at = $1
		WHERE session_id = $2 AND state IN ('pending', 'running')`, []any{at, op.SessionID}
	if op.IdempotencyKey != "" {
		q, args = q+` AND idempotency_key <> $3`, append(args, op.IdempotencyKey)
	}
	_, err := db.ExecContext(ctx, q, args...)
	return err
}

func noActiveOp(ctx context.Context, db execer, sessionID domain.SessionID) error {
	var id string
	err := db.QueryRowContext(ctx, `SELECT id FROM session_ops
		WHERE session_id = $1 AND state IN ('pending', 'running')`, sessionID).Scan(&id)
	if isNoRows(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: op %s", store.ErrOpInProgress, id)
}

// opByKey returns the op holding an idempotency key: the one pending,
// running or succeeded op with it. The literal predicates match the partial
// unique index, so the planner may use it.
func opByKey(ctx context.Context, db execer, sessionID domain.SessionID, key string) (domain.Op, error) {
	op, err := scanOp(db.QueryRowContext(ctx, `SELECT `+opCols+` FROM session_ops
		WHERE session_id = $1 AND idempotency_key = $2 AND idempotency_key <> ''
			AND state IN ('pending', 'running', 'succeeded')`, sessionID, key))
	if isNoRows(err) {
		return domain.Op{}, store.ErrNotFound
	}
	return op, err
}

// whyEnqueueFailed classifies a unique violation of an enqueue.
func (s *Store) whyEnqueueFailed(ctx context.Context, op domain.Op, supersede bool) (domain.Op, error) {
	if op.IdempotencyKey != "" {
		out, err := opByKey(ctx, s.read, op.SessionID, op.IdempotencyKey)
		if err == nil || !errors.Is(err, store.ErrNotFound) {
			return out, err
		}
	}
	var one int
	err := s.read.QueryRowContext(ctx, `SELECT 1 FROM session_ops WHERE id = $1`, op.ID).Scan(&one)
	if err == nil {
		return domain.Op{}, fmt.Errorf("%w: op id %s already used", store.ErrConflict, op.ID)
	}
	if !isNoRows(err) {
		return domain.Op{}, err
	}
	if supersede {
		return domain.Op{}, errRetry
	}
	if err := noActiveOp(ctx, s.read, op.SessionID); err != nil {
		return domain.Op{}, err
	}
	return domain.Op{}, errRetry
}

// claimBatch is how many candidates ClaimOp reads at a time.
const claimBatch = 16

// ClaimOp implements store.Ops. It reads a few candidates, then claims the
// first one a conditional UPDATE still finds claimable; a concurrent claimer
// that got there first makes that UPDATE match no row.
func (s *Store) ClaimOp(ctx context.Context, claimedBy string, now time.Time, lease time.Duration) (domain.Op, domain.Session, error) {
	nowU, until := micros(now), micros(now.Add(lease))
	for range 100 {
		ids, err := s.claimCandidates(ctx, nowU)
		if err != nil {
			return domain.Op{}, domain.Session{}, fmt.Errorf("claim op: %w", err)
		}
		if len(ids) == 0 {
			return domain.Op{}, domain.Session{}, fmt.Errorf("claim op: %w", store.ErrNoOp)
		}
		for _, id := range ids {
			op, sess, err := s.tryClaim(ctx, id, claimedBy, nowU, until)
			if isNoRows(err) {
				continue
			}
			if err != nil {
				return domain.Op{}, domain.Session{}, fmt.Errorf("claim op %s: %w", id, err)
			}
			return op, sess, nil
		}
	}
	return domain.Op{}, domain.Session{}, fmt.Errorf("claim op: %w: every candidate was taken", store.ErrNoOp)
}

func (s *Store) claimCandidates(ctx context.Context, now int64) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id FROM session_ops
		WHERE state IN ('pending', 'running') AND (state = 'pending' OR lease_until < $1)
		ORDER BY created_at, id LIMIT $2`, now, claimBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// tryClaim claims one op; sql.ErrNoRows when it is no longer claimable.
func (s *Store) tryClaim(ctx context.Context, id, claimedBy string, now, until int64) (op domain.Op, sess domain.Session, err error) {
	err = s.inTx(ctx, func(tx execer) error {
		var sessionID domain.SessionID
		err := tx.QueryRowContext(ctx, `UPDATE session_ops
			SET state = 'running', claimed_by = $2, lease_until = $3, attempts = attempts + 1, updated_at = $4
			WHERE id = $1 AND (state = 'pending' OR (state = 'running' AND lease_until < $4)) RETURNING session_id`,
			id, claimedBy, until, now).Scan(&sessionID)
		if err != nil {
			return err
		}
		sess, err = scanSession(tx.QueryRowContext(ctx, `UPDATE sessions SET epoch = epoch + 1
			WHERE id = $1 RETURNING `+sessionCols, sessionID))
		if err != nil {
			return fmt.Errorf("bump epoch of %s: %w", sessionID, err)
		}
		op, err = scanOp(tx.QueryRowContext(ctx, `UPDATE session_ops SET epoch = $2 WHERE id = $1 RETURNING `+opCols,
			id, sess.Epoch))
		return err
	})
	return op, sess, err
}

// RenewOp implements store.Ops.
func (s *Store) RenewOp(ctx context.Context, opID string, epoch int64, until time.Time) error {
	return s.fencedOpWrite(ctx, "renew op", opID, epoch, "lease_until = $3", micros(until))
}

// DeferOp implements store.Ops.
func (s *Store) DeferOp(ctx context.Context, opID string, epoch int64, until time.Time) error {
	return s.fencedOpWrite(ctx, "defer op", opID, epoch, "lease_until = $3, attempts = attempts - 1", micros(until))
}

// SetOpStep implements store.Ops.
func (s *Store) SetOpStep(ctx context.Context, opID string, epoch int64, step string) error {
	return s.fencedOpWrite(ctx, "set op step", opID, epoch, "step = $3", step)
}

// FinishOp implements store.Ops.
func (s *Store) FinishOp(ctx context.Context, opID string, epoch int64, state domain.OpState, errMsg string, at time.Time) error {
	if state != domain.OpSucceeded && state != domain.OpFailed {
		return fmt.Errorf("finish op %s: state %q is neither succeeded nor failed", opID, state)
	}
	return s.fencedOpWrite(ctx, "finish op", opID, epoch, "state = $3, error = $4, updated_at = $5",
		string(state), errMsg, micros(orNow(at)))
}

// fencedOpWrite applies set ($3...) to a running op that still has epoch.
func (s *Store) fencedOpWrite(ctx context.Context, action, opID string, epoch int64, set string, args ...any) error {
	res, err := s.write.ExecContext(ctx, `UPDATE session_ops SET `+set+`
		WHERE id = $1 AND epoch = $2 AND state = 'running'`,
		append([]any{opID, epoch}, args...)...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, opID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	var cur int64
	var state string
	err = s.read.QueryRowContext(ctx, `SELECT epoch, state FROM session_ops WHERE id = $1`, opID).Scan(&cur, &state)
	switch {
	case isNoRows(err):
		return fmt.Errorf("%s %s: %w", action, opID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("%s %s: %w", action, opID, err)
	case cur != epoch:
		return fmt.Errorf("%s %s: %w: epoch is %d, not %d", action, opID, store.ErrStaleEpoch, cur, epoch)
	}
	return fmt.Errorf("%s %s: %w: op is %s, not running", action, opID, store.ErrConflict, state)
}

// GetOp implements store.Ops.
func (s *Store) GetOp(ctx context.Context, id string) (domain.Op, error) {
	op, err := scanOp(s.read.QueryRowContext(ctx, `SELECT `+opCols+` FROM session_ops WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Op{}, fmt.Errorf("get op %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Op{}, fmt.Errorf("get op %s: %w", id, err)
	}
	return op, nil
}

// ListOps implements store.Ops, oldest first.
func (s *Store) ListOps(ctx context.Context, sessionID domain.SessionID) ([]domain.Op, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+opCols+` FROM session_ops
		WHERE session_id = $1 ORDER BY created_at, id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list ops of %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []domain.Op
	for rows.Next() {
		op, err := scanOp(rows)
		if err != nil {
			return nil, fmt.Errorf("list ops of %s: %w", sessionID, err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list ops of %s: %w", sessionID, err)
	}
	return out, nil
}
