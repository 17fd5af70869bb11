package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const eventCols = `session_id, seq, type, data, created_at`

func scanEvent(r scanner) (domain.Event, error) {
	var e domain.Event
	var data sql.NullString
	var created int64
	if err := r.Scan(&e.SessionID, &e.Seq, &e.Type, &data, &created); err != nil {
		return domain.Event{}, err
	}
	e.Data, e.CreatedAt = fromJSON(data), fromMicros(created)
	return e, nil
}

// AppendEvent implements store.Events: the session's event_seq is bumped and
// the event inserted in one transaction, so seqs stay gap-free.
func (s *Store) AppendEvent(ctx context.Context, e store.NewEvent) (domain.Event, error) {
	if e.SessionID == "" || e.Type == "" {
		return domain.Event{}, errors.New("append event: session id and type are required")
	}
	if err := checkJSON("data", e.Data); err != nil {
		return domain.Event{}, fmt.Errorf("append %s event to %s: %w", e.Type, e.SessionID, err)
	}
	at := micros(orNow(e.At))
	q, args := `UPDATE sessions SET event_seq = event_seq + 1 WHERE id = $1`, []any{e.SessionID}
	if e.Epoch > 0 {
		q, args = q+` AND epoch = $2`, append(args, e.Epoch)
	}
	var out domain.Event
	err := s.inTx(ctx, func(tx execer) error {
		var seq int64
		err := tx.QueryRowContext(ctx, q+` RETURNING event_seq`, args...).Scan(&seq)
		if isNoRows(err) {
			return whySessionUnchanged(ctx, tx, e.SessionID, e.Epoch, "")
		}
		if err != nil {
			return err
		}
		out, err = scanEvent(tx.QueryRowContext(ctx, `INSERT INTO session_events (`+eventCols+`)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+eventCols, e.SessionID, seq, e.Type, jsonArg(e.Data), at))
		return err
	})
	if err != nil {
		return domain.Event{}, fmt.Errorf("append %s event to %s: %w", e.Type, e.SessionID, err)
	}
	return out, nil
}

// ListEvents implements store.Events. A limit <= 0 means no limit; an
// unknown session has no events.
func (s *Store) ListEvents(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.Event, error) {
	q := `SELECT ` + eventCols + ` FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq`
	args := []any{sessionID, afterSeq}
	if limit > 0 {
		q, args = q+` LIMIT $3`, append(args, limit)
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []domain.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events of %s: %w", sessionID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of %s: %w", sessionID, err)
	}
	return out, nil
}
