package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/store"
)

// IngestTaskEvents implements store.Tasks. The no-op update of the task row
// comes first: it locks the row (Postgres; SQLite has one writer), so two
// ingests of one session run one after the other and neither appends an
// event the other took.
func (s *Store) IngestTaskEvents(ctx context.Context, taskID, sessionID string, rewoundTo *int64, events []store.TaskEvent) (int64, []store.TaskEvent, error) {
	action := fmt.Sprintf("ingest %d events of session %s into task %s", len(events), sessionID, taskID)
	if taskID == "" || sessionID == "" {
		return 0, nil, errors.New("ingest task events: task id and session id are required")
	}
	if err := checkTaskEvents(action, events); err != nil {
		return 0, nil, err
	}
	for i := 1; i < len(events); i++ {
		if events[i].GuestSeq <= events[i-1].GuestSeq {
			return 0, nil, fmt.Errorf("%s: guest seqs must increase, got %d after %d", action, events[i].GuestSeq, events[i-1].GuestSeq)
		}
	}
	var cursor int64
	var out []store.TaskEvent
	err := s.inTx(ctx, func(tx execer) error {
		var one int
		err := tx.QueryRowContext(ctx, `UPDATE tasks SET event_seq = event_seq WHERE id = $1 RETURNING 1`, taskID).Scan(&one)
		if isNoRows(err) {
			return fmt.Errorf("task %s: %w", taskID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var seq int64
		err = tx.QueryRowContext(ctx, `SELECT seq, guest_cursor FROM task_sessions WHERE task_id = $1 AND session_id = $2
			ORDER BY seq DESC LIMIT 1`, taskID, sessionID).Scan(&seq, &cursor)
		if isNoRows(err) {
			return fmt.Errorf("session %s is not one of the task's: %w", sessionID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		from := cursor
		if rewoundTo != nil && *rewoundTo >= 0 && *rewoundTo < cursor {
			cursor = *rewoundTo
		}
		var fresh []store.TaskEvent
		for _, e := range events {
			if e.GuestSeq > cursor {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) > 0 {
			if out, err = insertTaskEvents(ctx, tx, taskID, fresh); err != nil {
				return err
			}
			cursor = fresh[len(fresh)-1].GuestSeq
		}
		if cursor == from {
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE task_sessions SET guest_cursor = $3 WHERE task_id = $1 AND seq = $2`,
			taskID, seq, cursor)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", action, err)
	}
	return cursor, out, nil
}

// TaskBySession implements store.Tasks.
func (s *Store) TaskBySession(ctx context.Context, sessionID string) (store.Task, error) {
	if sessionID == "" {
		return store.Task{}, fmt.Errorf("task of session %q: %w", sessionID, store.ErrNotFound)
	}
	t, err := scanTask(s.read.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE session_id = $1
		ORDER BY created_at DESC, id DESC LIMIT 1`, sessionID))
	return t, rowFound(err, "task of session "+sessionID)
}

// ClaimTaskSetup implements store.Tasks.
func (s *Store) ClaimTaskSetup(ctx context.Context, id string, now, staleBefore time.Time) (bool, error) {
	res, err := s.write.ExecContext(ctx, `UPDATE tasks SET updated_at = $2 WHERE id = $1 AND state = $3 AND updated_at <= $4`,
		id, micros(now), string(store.TaskStarting), micros(staleBefore))
	if err != nil {
		return false, fmt.Errorf("claim setup of task %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("claim setup of task %s: %w", id, err)
	}
	return n == 1, nil
}
