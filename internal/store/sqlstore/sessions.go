package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

const sessionCols = `id, state, desired_state, host_id, epoch, reason, spec, idempotency_key, event_seq,
	head_snapshot_id, last_activity, created_at, updated_at, org_id, owner_id, shared`

func scanSession(r scanner) (domain.Session, error) {
	var s domain.Session
	var state string
	var spec sql.NullString
	var activity, created, updated int64
	err := r.Scan(&s.ID, &state, &s.DesiredState, &s.HostID, &s.Epoch, &s.Reason, &spec,
		&s.IdempotencyKey, &s.EventSeq, &s.HeadSnapshotID, &activity, &created, &updated,
		&s.Spec.Owner.OrgID, &s.Spec.Owner.UserID, &s.Spec.Owner.Shared)
	if err != nil {
		return domain.Session{}, err
	}
	s.State = domain.SessionState(state)
	owner := s.Spec.Owner
	if err := decodeTyped("spec", spec, &s.Spec); err != nil {
		return domain.Session{}, fmt.Errorf("session %s: %w", s.ID, err)
	}
	s.Spec.Owner = owner
	s.LastActivity, s.CreatedAt, s.UpdatedAt = fromMicros(activity), fromMicros(created), fromMicros(updated)
	return s, nil
}

// CreateSession implements store.Sessions. An idempotency key is held by
// the session using it until that session's latest create op fails or is
// superseded; then the next CreateSession with the key releases it (the old
// session keeps the key as a record) and creates a new session.
func (s *Store) CreateSession(ctx context.Context, n store.NewSession) (domain.Session, domain.Op, bool, error) {
	if n.ID == "" || n.OpID == "" {
		return domain.Session{}, domain.Op{}, false, errors.New("create session: session id and op id are required")
	}
	if _, err := typedArg("spec", n.Spec); err != nil {
		return domain.Session{}, domain.Op{}, false, fmt.Errorf("create session %s: %w", n.ID, err)
	}
	if n.IdempotencyKey != "" {
		sess, op, live, err := sessionByKey(ctx, s.read, n.IdempotencyKey)
		if err == nil && live {
			return sess, op, false, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return domain.Session{}, domain.Op{}, false, fmt.Errorf("create session %s: %w", n.ID, err)
		}
	}
	sess, op, created, err := s.insertSession(ctx, n)
	if s.isUnique(err) && n.IdempotencyKey != "" {
		// A concurrent call with the same key won the insert.
		if sess, op, live, err := sessionByKey(ctx, s.read, n.IdempotencyKey); err == nil && live {
			return sess, op, false, nil
		}
	}
	if s.isUnique(err) {
		return domain.Session{}, domain.Op{}, false, fmt.Errorf("create session %s: %w: id already used", n.ID, store.ErrConflict)
	}
	if err != nil {
		return domain.Session{}, domain.Op{}, false, fmt.Errorf("create session %s: %w", n.ID, err)
	}
	return sess, op, created, nil
}

// insertSession inserts the session, its create op and its first event. With
// a key, it first looks again inside the transaction: a session still
// holding the key is returned (created false); one whose create op failed
// or was superseded gives the key up.
func (s *Store) insertSession(ctx context.Context, n store.NewSession) (sess domain.Session, op domain.Op, created bool, err error) {
	at := micros(orNow(n.At))
	spec, err := typedArg("spec", n.Spec)
	if err != nil {
		return sess, op, false, err
	}
	err = s.inTx(ctx, func(tx execer) error {
		if n.IdempotencyKey != "" {
			old, oldOp, live, err := sessionByKey(ctx, tx, n.IdempotencyKey)
			switch {
			case err == nil && live:
				sess, op = old, oldOp
				return nil
			case err == nil:
				_, err = tx.ExecContext(ctx, `UPDATE sessions SET key_released = TRUE WHERE id = $1`, old.ID)
			case errors.Is(err, store.ErrNotFound):
				err = nil
			}
			if err != nil {
				return err
			}
		}
		sess, err = scanSession(tx.QueryRowContext(ctx, `INSERT INTO sessions (`+sessionCols+`)
			VALUES ($1, $2, $3, '', 0, '', $4, $5, 1, '', $6, $6, $6, $7, $8, $9) RETURNING `+sessionCols,
			n.ID, string(domain.SessionCreated), string(domain.DesireActive), spec, n.IdempotencyKey, at,
			n.Spec.Owner.OrgID, n.Spec.Owner.UserID, n.Spec.Owner.Shared))
		if err != nil {
			return err
		}
		op, err = scanOp(tx.QueryRowContext(ctx, `INSERT INTO session_ops (`+opCols+`)
			VALUES ($1, $2, $3, $4, '', 0, '', 0, '', '', 0, $5, $5) RETURNING `+opCols,
			n.OpID, n.ID, string(domain.OpCreate), string(domain.OpPending), at))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_events (session_id, seq, type, data, created_at)
			VALUES ($1, 1, 'created', NULL, $2)`, n.ID, at)
		created = true
		return err
	})
	return sess, op, created, err
}

// sessionByKey returns the session holding an idempotency key and its latest
// create op; live is false when that op failed or was superseded.
func sessionByKey(ctx context.Context, db execer, key string) (domain.Session, domain.Op, bool, error) {
	sess, err := scanSession(db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE idempotency_key = $1 AND idempotency_key <> '' AND NOT key_released`, key))
	if isNoRows(err) {
		return domain.Session{}, domain.Op{}, false, store.ErrNotFound
	}
	if err != nil {
		return domain.Session{}, domain.Op{}, false, err
	}
	op, err := scanOp(db.QueryRowContext(ctx, `SELECT `+opCols+` FROM session_ops
		WHERE session_id = $1 AND kind = $2 ORDER BY created_at DESC, id DESC LIMIT 1`, sess.ID, string(domain.OpCreate)))
	if isNoRows(err) {
		return sess, domain.Op{}, true, nil
	}
	if err != nil {
		return domain.Session{}, domain.Op{}, false, err
	}
	return sess, op, op.State != domain.OpFailed && op.State != domain.OpSuperseded, nil
}

// GetSession implements store.Sessions.
func (s *Store) GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error) {
	sess, err := scanSession(s.read.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Session{}, fmt.Errorf("get session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Session{}, fmt.Errorf("get session %s: %w", id, err)
	}
	return sess, nil
}

// CountSessionsByState implements store.Sessions.
func (s *Store) CountSessionsByState(ctx context.Context) (map[domain.SessionState]int, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT state, COUNT(*) FROM sessions GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count sessions by state: %w", err)
	}
	defer rows.Close()
	out := map[domain.SessionState]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count sessions by state: %w", err)
		}
		out[domain.SessionState(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count sessions by state: %w", err)
	}
	return out, nil
}

// ListSessions implements store.Sessions, ordered by id.
func (s *Store) ListSessions(ctx context.Context, f domain.SessionFilter) ([]domain.Session, error) {
	where, args := viewerWhere(f.Viewer)
	if f.HostID != "" {
		args = append(args, f.HostID)
		where = append(where, fmt.Sprintf("host_id = $%d", len(args)))
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(args)+1, len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.AfterID != "" {
		args = append(args, f.AfterID)
		where = append(where, fmt.Sprintf("id > $%d", len(args)))
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []domain.Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// SetDesiredState implements store.Sessions.
func (s *Store) SetDesiredState(ctx context.Context, id domain.SessionID, desired domain.DesiredState) error {
	if !desired.Valid() {
		return fmt.Errorf("set desired state of %s: unknown desired state %q", id, desired)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE sessions SET desired_state = $2 WHERE id = $1`, id, string(desired))
	if err != nil {
		return fmt.Errorf("set desired state of %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("set desired state of %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// TouchSession implements store.Sessions.
func (s *Store) TouchSession(ctx context.Context, id domain.SessionID, at time.Time) error {
	res, err := s.write.ExecContext(ctx, `UPDATE sessions SET last_activity = $2 WHERE id = $1 AND last_activity < $2`,
		id, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("touch session %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	// No row changed: unknown, or already at or after at.
	var one int
	err = s.write.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = $1`, id).Scan(&one)
	if isNoRows(err) {
		return fmt.Errorf("touch session %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("touch session %s: %w", id, err)
	}
	return nil
}

// stateData is the Data of a "state" event.
type stateData struct {
	From   domain.SessionState `json:"from"`
	To     domain.SessionState `json:"to"`
	Event  lifecycle.Event     `json:"event"`
	Reason *string             `json:"reason,omitempty"`
	HostID *domain.HostID      `json:"host_id,omitempty"`
}

// ApplyTransition implements store.Sessions.
func (s *Store) ApplyTransition(ctx context.Context, t store.Transition) (domain.Session, error) {
	next, err := lifecycle.Transition(t.From, t.Event)
	if err != nil {
		return domain.Session{}, fmt.Errorf("apply transition to %s: %w", t.SessionID, err)
	}
	if next != t.To {
		return domain.Session{}, fmt.Errorf("apply transition to %s: %w: %s on %s leads to %s, not %s",
			t.SessionID, lifecycle.ErrIllegal, t.Event, t.From, next, t.To)
	}
	data, err := json.Marshal(stateData{From: t.From, To: t.To, Event: t.Event, Reason: t.Reason, HostID: t.HostID})
	if err != nil {
		return domain.Session{}, fmt.Errorf("apply transition to %s: %w", t.SessionID, err)
	}
	at := micros(orNow(t.At))
	args := []any{t.SessionID, t.Epoch, string(t.From), string(t.To), at}
	set := "state = $4, updated_at = $5, event_seq = event_seq + 1"
	if t.HostID != nil {
		args = append(args, *t.HostID)
		set += fmt.Sprintf(", host_id = $%d", len(args))
	}
	if t.Reason != nil {
		args = append(args, *t.Reason)
		set += fmt.Sprintf(", reason = $%d", len(args))
	}
	if t.Desired != nil {
		if !t.Desired.Valid() {
			return domain.Session{}, fmt.Errorf("apply transition to %s: unknown desired state %q", t.SessionID, *t.Desired)
		}
		args = append(args, string(*t.Desired))
		set += fmt.Sprintf(", desired_state = CASE WHEN desired_state = '%s' THEN desired_state ELSE $%d END", domain.DesireDeleted, len(args))
	}
	var sess domain.Session
	err = s.inTx(ctx, func(tx execer) error {
		sess, err = scanSession(tx.QueryRowContext(ctx, `UPDATE sessions SET `+set+`
			WHERE id = $1 AND epoch = $2 AND state = $3 RETURNING `+sessionCols, args...))
		if isNoRows(err) {
			return whySessionUnchanged(ctx, tx, t.SessionID, t.Epoch, t.From)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_events (session_id, seq, type, data, created_at)
			VALUES ($1, $2, 'state', $3, $4)`, t.SessionID, sess.EventSeq, string(data), at)
		return err
	})
	if err != nil {
		return domain.Session{}, fmt.Errorf("apply transition %s to %s: %w", t.Event, t.SessionID, err)
	}
	return sess, nil
}

// whySessionUnchanged explains why a fenced session write matched no row.
// An empty from skips the state check.
func whySessionUnchanged(ctx context.Context, db execer, id domain.SessionID, epoch int64, from domain.SessionState) error {
	var cur int64
	var state string
	err := db.QueryRowContext(ctx, `SELECT epoch, state FROM sessions WHERE id = $1`, id).Scan(&cur, &state)
	switch {
	case isNoRows(err):
		return store.ErrNotFound
	case err != nil:
		return err
	case cur != epoch:
		return fmt.Errorf("%w: epoch is %d, not %d", store.ErrStaleEpoch, cur, epoch)
	case from != "" && state != string(from):
		return fmt.Errorf("%w: state is %s, not %s", store.ErrConflict, state, from)
	}
	return fmt.Errorf("%w: session changed concurrently", store.ErrConflict)
}

// viewerWhere is the condition keeping what v Sees (domain.Viewer.Sees),
// with its arguments from $1; none for a nil viewer.
func viewerWhere(v *domain.Viewer) ([]string, []any) {
	if v == nil {
		return nil, nil
	}
	if v.OrgID == "" {
		return []string{"FALSE"}, nil
	}
	if v.All {
		return []string{"org_id = $1"}, []any{v.OrgID}
	}
	return []string{"org_id = $1 AND (shared OR (owner_id <> '' AND owner_id = $2))"}, []any{v.OrgID, v.UserID}
}
