package sqlstore

import (
	"context"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const egressCols = `session_id, seq, at, kind, host, port, verdict, bytes_up, bytes_down, reason, dropped, created_at, proto, addr`

func scanEgress(r scanner) (domain.EgressEvent, error) {
	var e domain.EgressEvent
	var at, created int64
	if err := r.Scan(&e.SessionID, &e.Seq, &at, &e.Kind, &e.Host, &e.Port, &e.Verdict, &e.BytesUp, &e.BytesDown,
		&e.Reason, &e.Dropped, &created, &e.Proto, &e.Addr); err != nil {
		return domain.EgressEvent{}, err
	}
	e.At, e.CreatedAt = fromMicros(at), fromMicros(created)
	return e, nil
}

// AppendEgressEvents implements store.Egress: the session's egress_seq is
// bumped by the batch (which locks the session's row, so appends of one
// session are serialized), the events inserted under the seqs it freed,
// and the rows older than the newest a.Keep deleted, in one transaction.
func (s *Store) AppendEgressEvents(ctx context.Context, a store.EgressAppend) (int64, error) {
	if a.SessionID == "" {
		return 0, fmt.Errorf("append egress events: a session id is required")
	}
	at := micros(orNow(a.At))
	q, args := `UPDATE sessions SET egress_seq = egress_seq + $2 WHERE id = $1`, []any{a.SessionID, len(a.Events)}
	if a.Epoch > 0 {
		q, args = q+` AND epoch = $3`, append(args, a.Epoch)
	}
	var last int64
	err := s.inTx(ctx, func(tx execer) error {
		err := tx.QueryRowContext(ctx, q+` RETURNING egress_seq`, args...).Scan(&last)
		if isNoRows(err) {
			return whySessionUnchanged(ctx, tx, a.SessionID, a.Epoch, "")
		}
		if err != nil {
			return err
		}
		seq := last - int64(len(a.Events))
		for _, e := range a.Events {
			seq++
			if _, err := tx.ExecContext(ctx, `INSERT INTO egress_events (`+egressCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, a.SessionID, seq, micros(e.At), e.Kind, e.Host, e.Port,
				e.Verdict, e.BytesUp, e.BytesDown, e.Reason, e.Dropped, at, e.Proto, e.Addr); err != nil {
				return err
			}
		}
		if a.Keep > 0 && len(a.Events) > 0 && last > int64(a.Keep) {
			_, err = tx.ExecContext(ctx, `DELETE FROM egress_events WHERE session_id = $1 AND seq <= $2`, a.SessionID, last-int64(a.Keep))
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("append %d egress events to %s: %w", len(a.Events), a.SessionID, err)
	}
	return last, nil
}

// ListEgressEvents implements store.Egress.
func (s *Store) ListEgressEvents(ctx context.Context, q store.EgressQuery) ([]domain.EgressEvent, error) {
	limit := q.Limit
	if limit <= 0 || limit > store.MaxEgressPage {
		limit = store.MaxEgressPage
	}
	sql := `SELECT ` + egressCols + ` FROM egress_events WHERE session_id = $1`
	switch {
	case q.Ascending:
		sql += ` AND seq > $2 ORDER BY seq LIMIT $3`
	case q.Before > 0:
		sql += ` AND seq < $2 ORDER BY seq DESC LIMIT $3`
	default:
		sql += ` AND seq > $2 ORDER BY seq DESC LIMIT $3`
	}
	arg := q.After
	if !q.Ascending {
		arg = q.Before
	}
	rows, err := s.read.QueryContext(ctx, sql, q.SessionID, arg, limit)
	if err != nil {
		return nil, fmt.Errorf("list egress events of %s: %w", q.SessionID, err)
	}
	defer rows.Close()
	var out []domain.EgressEvent
	for rows.Next() {
		e, err := scanEgress(rows)
		if err != nil {
			return nil, fmt.Errorf("list egress events of %s: %w", q.SessionID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list egress events of %s: %w", q.SessionID, err)
	}
	return out, nil
}
