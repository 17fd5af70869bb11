package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const outboxCols = `session_id, seq, id, kind, payload, state, delivered_epoch, created_at, delivered_at`

func scanOutbox(r scanner) (domain.OutboxItem, error) {
	var it domain.OutboxItem
	var payload sql.NullString
	var state string
	var created, delivered int64
	err := r.Scan(&it.SessionID, &it.Seq, &it.ID, &it.Kind, &payload, &state, &it.DeliveredEpoch, &created, &delivered)
	if err != nil {
		return domain.OutboxItem{}, err
	}
	it.Payload, it.State = fromJSON(payload), domain.OutboxState(state)
	it.CreatedAt, it.DeliveredAt = fromMicros(created), fromMicros(delivered)
	return it, nil
}

// PutOutbox implements store.Outbox. Only SessionID, ID, Kind, Payload and
// CreatedAt (now when zero) are taken from it; the item starts pending. The
// session's outbox_seq is bumped and the item inserted in one transaction,
// so a failed put (a reused ID) leaves no gap.
func (s *Store) PutOutbox(ctx context.Context, it domain.OutboxItem) (domain.OutboxItem, bool, error) {
	if it.SessionID == "" || it.ID == "" || it.Kind == "" {
		return domain.OutboxItem{}, false, errors.New("put outbox item: session id, id and kind are required")
	}
	if err := checkJSON("payload", it.Payload); err != nil {
		return domain.OutboxItem{}, false, fmt.Errorf("put outbox item %s for %s: %w", it.ID, it.SessionID, err)
	}
	if old, err := outboxByID(ctx, s.read, it.SessionID, it.ID); err == nil || !isNoRows(err) {
		return old, false, wrapOutbox(it, err)
	}
	out, err := s.insertOutbox(ctx, it)
	if s.isUnique(err) {
		// A concurrent put with the same ID won.
		old, err := outboxByID(ctx, s.read, it.SessionID, it.ID)
		return old, false, wrapOutbox(it, err)
	}
	if err != nil {
		return domain.OutboxItem{}, false, wrapOutbox(it, err)
	}
	return out, true, nil
}

func wrapOutbox(it domain.OutboxItem, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("put outbox item %s for %s: %w", it.ID, it.SessionID, err)
}

func (s *Store) insertOutbox(ctx context.Context, it domain.OutboxItem) (out domain.OutboxItem, err error) {
	at := micros(orNow(it.CreatedAt))
	err = s.inTx(ctx, func(tx execer) error {
		var seq int64
		err := tx.QueryRowContext(ctx, `UPDATE sessions SET outbox_seq = outbox_seq + 1 WHERE id = $1
			RETURNING outbox_seq`, it.SessionID).Scan(&seq)
		if isNoRows(err) {
			return fmt.Errorf("session: %w", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		out, err = scanOutbox(tx.QueryRowContext(ctx, `INSERT INTO session_outbox (`+outboxCols+`)
			VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, 0) RETURNING `+outboxCols,
			it.SessionID, seq, it.ID, it.Kind, jsonArg(it.Payload), at))
		return err
	})
	return out, err
}

func outboxByID(ctx context.Context, db execer, sessionID domain.SessionID, id string) (domain.OutboxItem, error) {
	return scanOutbox(db.QueryRowContext(ctx, `SELECT `+outboxCols+` FROM session_outbox
		WHERE session_id = $1 AND id = $2`, sessionID, id))
}

// ListOutbox implements store.Outbox. A limit <= 0 means no limit; an
// unknown session has no items.
func (s *Store) ListOutbox(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.OutboxItem, error) {
	q := `SELECT ` + outboxCols + ` FROM session_outbox WHERE session_id = $1 AND seq > $2 ORDER BY seq`
	args := []any{sessionID, afterSeq}
	if limit > 0 {
		q, args = q+` LIMIT $3`, append(args, limit)
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list outbox of %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []domain.OutboxItem
	for rows.Next() {
		it, err := scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list outbox of %s: %w", sessionID, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list outbox of %s: %w", sessionID, err)
	}
	return out, nil
}

// MarkDelivered implements store.Outbox.
func (s *Store) MarkDelivered(ctx context.Context, sessionID domain.SessionID, through, epoch int64, at time.Time) error {
	err := s.fencedOutboxWrite(ctx, sessionID, epoch, `UPDATE session_outbox
		SET state = 'delivered', delivered_epoch = $3, delivered_at = $4
		WHERE session_id = $1 AND seq <= $2 AND state = 'pending'`, through, epoch, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("mark outbox of %s delivered through %d: %w", sessionID, through, err)
	}
	return nil
}

// RollbackOutbox implements store.Outbox. Rolled-back items are pending
// again, with no delivery epoch or time.
func (s *Store) RollbackOutbox(ctx context.Context, sessionID domain.SessionID, after, epoch int64) error {
	err := s.fencedOutboxWrite(ctx, sessionID, epoch, `UPDATE session_outbox
		SET state = 'pending', delivered_epoch = 0, delivered_at = 0
		WHERE session_id = $1 AND seq > $2 AND state = 'delivered'`, after)
	if err != nil {
		return fmt.Errorf("roll back outbox of %s after %d: %w", sessionID, after, err)
	}
	return nil
}

// fencedOutboxWrite runs q ($1 is the session id, then args) in a
// transaction that first checks the session's epoch with an UPDATE: that
// takes the session's row lock, so a concurrent claim (which bumps the epoch)
// either waits for this write or makes it stale.
func (s *Store) fencedOutboxWrite(ctx context.Context, sessionID domain.SessionID, epoch int64, q string, args ...any) error {
	return s.inTx(ctx, func(tx execer) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET outbox_seq = outbox_seq WHERE id = $1 AND epoch = $2`,
			sessionID, epoch)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return whySessionUnchanged(ctx, tx, sessionID, epoch, "")
		}
		_, err = tx.ExecContext(ctx, q, append([]any{sessionID}, args...)...)
		return err
	})
}
