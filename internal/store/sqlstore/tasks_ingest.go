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

// IngestTaskEvents implements store.Tasks. The no-op update of the task row
// comes first: it locks the row (Postgres; SQLite has one writer), so two
// ingests of one session run one after the other and neither appends an
// event the other took.
func (s *Store) IngestTaskEvents(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, rewoundTo *int64, events []domain.TaskEvent) (int64, []domain.TaskEvent, error) {
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
	var out []domain.TaskEvent
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
		var fresh []domain.TaskEvent
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
func (s *Store) TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error) {
	if sessionID == "" {
		return domain.Task{}, fmt.Errorf("task of session %q: %w", sessionID, store.ErrNotFound)
	}
	t, err := scanTask(s.read.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE session_id = $1
		ORDER BY created_at DESC, id DESC LIMIT 1`, sessionID))
	return t, rowFound(err, "task of session "+string(sessionID))
}

// ClaimTaskSetup implements store.Tasks.
func (s *Store) ClaimTaskSetup(ctx context.Context, id domain.TaskID, now, staleBefore, held time.Time) (bool, error) {
	h := int64(-1) // no stamp is negative
	if !held.IsZero() {
		h = micros(held)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE tasks SET updated_at = $2 WHERE id = $1 AND state = $3
		AND (updated_at <= $4 OR updated_at = $5)`,
		id, micros(now), string(domain.TaskStarting), micros(staleBefore), h)
	return affectedOne(res, err, "claim setup of task "+string(id))
}

// UpdateTaskState implements store.Tasks.
func (s *Store) UpdateTaskState(ctx context.Context, id domain.TaskID, from []domain.TaskState, state domain.TaskState, errMsg string, at time.Time) (bool, error) {
	action := fmt.Sprintf("update task %s state to %s", id, state)
	if !state.Valid() || len(from) == 0 {
		return false, fmt.Errorf("%s: unknown state, or no state to move from", action)
	}
	args := []any{id, string(state), errMsg, micros(orNow(at))}
	for _, f := range from {
		args = append(args, string(f))
	}
	res, err := s.write.ExecContext(ctx, `UPDATE tasks SET state = $2, error = $3, updated_at = $4
		WHERE id = $1 AND state IN (`+placeholders(5, len(from))+`)`, args...)
	ok, err := affectedOne(res, err, action)
	if err != nil || ok {
		return ok, err
	}
	if _, gerr := s.GetTask(ctx, id); gerr != nil {
		return false, fmt.Errorf("%s: %w", action, gerr)
	}
	return false, nil
}

// ReplaceSession implements store.Tasks: the conditional update of the
// task row locks it, so of concurrent replacers one wins.
func (s *Store) ReplaceSession(ctx context.Context, taskID domain.TaskID, oldSessionID, newSessionID domain.SessionID, at time.Time) (domain.TaskSession, error) {
	action := fmt.Sprintf("replace session %s of task %s with %s", oldSessionID, taskID, newSessionID)
	if taskID == "" || newSessionID == "" || oldSessionID == newSessionID {
		return domain.TaskSession{}, fmt.Errorf("%s: task id and a new session id are required", action)
	}
	var out domain.TaskSession
	err := s.inTx(ctx, func(tx execer) error {
		stamp := micros(orNow(at))
		res, err := tx.ExecContext(ctx, `UPDATE tasks SET session_id = $3, state = $4, error = '', updated_at = $5
			WHERE id = $1 AND session_id = $2`, taskID, oldSessionID, newSessionID, string(domain.TaskStarting), stamp)
		if ok, err := affectedOne(res, err, action); err != nil || !ok {
			if err == nil {
				err = store.ErrConflict
			}
			return err
		}
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM task_sessions WHERE task_id = $1`, taskID).Scan(&last); err != nil {
			return err
		}
		out, err = scanTaskSession(tx.QueryRowContext(ctx, `INSERT INTO task_sessions (`+taskSessionCols+`)
			VALUES ($1, $2, $3, $4) RETURNING `+taskSessionCols, taskID, last+1, newSessionID, stamp))
		return err
	})
	if err != nil {
		return domain.TaskSession{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// affectedOne reports whether an update changed exactly one row.
func affectedOne(res sql.Result, err error, action string) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("%s: %w", action, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", action, err)
	}
	return n == 1, nil
}
