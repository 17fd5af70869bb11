package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const taskCols = `id, profile_id, profile_version, receipt, title, state, session_id, event_seq, error,
	created_at, updated_at, event_bytes, run_id, usage_model, input_tokens, output_tokens, cache_read_tokens,
	cache_write_tokens, cost_micros, cost_currency, unpriced_usages, started_by, org_id, owner_id, shared`

func scanTask(r scanner) (domain.Task, error) {
	var t domain.Task
	var receipt sql.NullString
	var state string
	var created, updated int64
	u := &t.Usage
	err := r.Scan(&t.ID, &t.ProfileID, &t.ProfileVersion, &receipt, &t.Title, &state, &t.SessionID, &t.EventSeq,
		&t.Error, &created, &updated, &t.EventBytes, &t.RunID, &u.Model, &u.Tokens.Input, &u.Tokens.Output,
		&u.Tokens.CacheRead, &u.Tokens.CacheWrite, &u.Cost.Micros, &u.Cost.Currency, &u.Unpriced, &t.StartedBy,
		&t.Owner.OrgID, &t.Owner.UserID, &t.Owner.Shared)
	if err != nil {
		return domain.Task{}, err
	}
	t.Receipt, t.State = fromJSON(receipt), domain.TaskState(state)
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	return t, nil
}

const taskSessionCols = `task_id, seq, session_id, created_at`

func scanTaskSession(r scanner) (domain.TaskSession, error) {
	var ts domain.TaskSession
	var created int64
	if err := r.Scan(&ts.TaskID, &ts.Seq, &ts.SessionID, &created); err != nil {
		return domain.TaskSession{}, err
	}
	ts.CreatedAt = fromMicros(created)
	return ts, nil
}

const taskEventCols = `task_id, seq, type, payload, created_at`

func scanTaskEvent(r scanner) (domain.TaskEvent, error) {
	var e domain.TaskEvent
	var payload sql.NullString
	var created int64
	if err := r.Scan(&e.TaskID, &e.Seq, &e.Type, &payload, &created); err != nil {
		return domain.TaskEvent{}, err
	}
	e.Payload, e.At = fromJSON(payload), fromMicros(created)
	return e, nil
}

// CreateTask implements store.Tasks.
func (s *Store) CreateTask(ctx context.Context, t domain.Task) (domain.Task, error) {
	action := "create task " + t.ID
	if t.State == "" {
		t.State = domain.TaskStarting
	}
	if t.ID == "" || t.ProfileID == "" {
		return domain.Task{}, errors.New("create task: id and profile id are required")
	}
	if !t.State.Valid() {
		return domain.Task{}, fmt.Errorf("%s: unknown task state %q", action, t.State)
	}
	if err := checkJSON("receipt", t.Receipt); err != nil {
		return domain.Task{}, fmt.Errorf("%s: %w", action, err)
	}
	at := micros(orNow(t.CreatedAt))
	var out domain.Task
	err := s.inTx(ctx, func(tx execer) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM profiles WHERE id = $1`, t.ProfileID).Scan(&one)
		if isNoRows(err) {
			return fmt.Errorf("profile %s: %w", t.ProfileID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		out, err = scanTask(tx.QueryRowContext(ctx, `INSERT INTO tasks (`+taskCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9, $9, 0, $10, '', 0, 0, 0, 0, 0, '', 0, $11, $12, $13, $14) RETURNING `+taskCols,
			t.ID, t.ProfileID, t.ProfileVersion, jsonArg(t.Receipt), t.Title, string(t.State), t.SessionID,
			t.Error, at, t.RunID, t.StartedBy, t.Owner.OrgID, t.Owner.UserID, t.Owner.Shared))
		if err != nil || t.SessionID == "" {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO task_sessions (`+taskSessionCols+`) VALUES ($1, 1, $2, $3)`,
			t.ID, t.SessionID, at)
		return err
	})
	if s.isUnique(err) {
		return domain.Task{}, fmt.Errorf("%s: %w: id already used", action, store.ErrConflict)
	}
	if err != nil {
		return domain.Task{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// GetTask implements store.Tasks.
func (s *Store) GetTask(ctx context.Context, id domain.TaskID) (domain.Task, error) {
	t, err := scanTask(s.read.QueryRowContext(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
	return t, rowFound(err, "get task "+string(id))
}

// ListTasks implements store.Tasks.
func (s *Store) ListTasks(ctx context.Context, f domain.TaskFilter) ([]domain.Task, error) {
	where, args := viewerWhere(f.Viewer)
	if f.ProfileID != "" {
		args = append(args, f.ProfileID)
		where = append(where, fmt.Sprintf("profile_id = $%d", len(args)))
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(args)+1, len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if f.AfterID != "" {
		args = append(args, micros(f.AfterCreated), f.AfterID)
		n := len(args)
		where = append(where, fmt.Sprintf("(created_at > $%d OR (created_at = $%d AND id > $%d))", n-1, n-1, n))
	}
	q := `SELECT ` + taskCols + ` FROM tasks`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at, id"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	out, err := collect(rows, scanTask)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// SetTaskState implements store.Tasks.
func (s *Store) SetTaskState(ctx context.Context, id domain.TaskID, state domain.TaskState, errMsg string, at time.Time) error {
	action := fmt.Sprintf("set task %s state %s", id, state)
	if !state.Valid() {
		return fmt.Errorf("%s: unknown task state", action)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE tasks SET state = $2, error = $3, updated_at = $4 WHERE id = $1`,
		id, string(state), errMsg, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	} else if n != 1 {
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	}
	return nil
}

// AttachSession implements store.Tasks. A no-op update of the task row
// comes first: it locks the row (Postgres; SQLite has one writer), so
// concurrent attaches of one task run one after the other and read each
// other's seqs.
func (s *Store) AttachSession(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, at time.Time) (domain.TaskSession, error) {
	action := fmt.Sprintf("attach session %s to task %s", sessionID, taskID)
	if taskID == "" || sessionID == "" {
		return domain.TaskSession{}, errors.New("attach session: task id and session id are required")
	}
	var out domain.TaskSession
	err := s.inTx(ctx, func(tx execer) error {
		var cur domain.SessionID
		err := tx.QueryRowContext(ctx, `UPDATE tasks SET session_id = session_id WHERE id = $1
			RETURNING session_id`, taskID).Scan(&cur)
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		last, err := scanTaskSession(tx.QueryRowContext(ctx, `SELECT `+taskSessionCols+` FROM task_sessions
			WHERE task_id = $1 ORDER BY seq DESC LIMIT 1`, taskID))
		if err != nil && !isNoRows(err) {
			return err
		}
		if err == nil && cur == sessionID && last.SessionID == sessionID {
			out = last
			return nil
		}
		out, err = scanTaskSession(tx.QueryRowContext(ctx, `INSERT INTO task_sessions (`+taskSessionCols+`)
			VALUES ($1, $2, $3, $4) RETURNING `+taskSessionCols, taskID, last.Seq+1, sessionID, micros(orNow(at))))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE tasks SET session_id = $2, updated_at = $3 WHERE id = $1`,
			taskID, sessionID, micros(out.CreatedAt))
		return err
	})
	if err != nil {
		return domain.TaskSession{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// ListTaskSessions implements store.Tasks.
func (s *Store) ListTaskSessions(ctx context.Context, taskID domain.TaskID) ([]domain.TaskSession, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+taskSessionCols+` FROM task_sessions
		WHERE task_id = $1 ORDER BY seq`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list sessions of task %s: %w", taskID, err)
	}
	out, err := collect(rows, scanTaskSession)
	if err != nil {
		return nil, fmt.Errorf("list sessions of task %s: %w", taskID, err)
	}
	return out, nil
}

// AppendTaskEvents implements store.Tasks (see insertTaskEvents).
func (s *Store) AppendTaskEvents(ctx context.Context, taskID domain.TaskID, events []domain.TaskEvent) ([]domain.TaskEvent, error) {
	action := fmt.Sprintf("append %d events to task %s", len(events), taskID)
	if taskID == "" {
		return nil, errors.New("append task events: task id is required")
	}
	if len(events) == 0 {
		return nil, nil
	}
	if err := checkTaskEvents(action, events); err != nil {
		return nil, err
	}
	var out []domain.TaskEvent
	err := s.inTx(ctx, func(tx execer) error {
		var err error
		out, err = insertTaskEvents(ctx, tx, taskID, events)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// checkTaskEvents refuses events without a type or with a malformed payload.
func checkTaskEvents(action string, events []domain.TaskEvent) error {
	for i, e := range events {
		if e.Type == "" {
			return fmt.Errorf("%s: event %d has no type", action, i)
		}
		if err := checkJSON("payload", e.Payload); err != nil {
			return fmt.Errorf("%s: event %d: %w", action, i, err)
		}
	}
	return nil
}

// insertTaskEvents numbers events after the task's last seq and inserts
// them. Bumping tasks.event_seq by the batch size locks the task row until
// commit, so concurrent batches, on any replica, take disjoint
// consecutive seqs; the same update adds their bytes.
func insertTaskEvents(ctx context.Context, tx execer, taskID domain.TaskID, events []domain.TaskEvent) ([]domain.TaskEvent, error) {
	var size int64
	for _, e := range events {
		size += e.Bytes()
	}
	var last int64
	err := tx.QueryRowContext(ctx, `UPDATE tasks SET event_seq = event_seq + $2, event_bytes = event_bytes + $3 WHERE id = $1
		RETURNING event_seq`, taskID, len(events), size).Scan(&last)
	if err == nil {
		err = addTaskUsage(ctx, tx, taskID, events)
	}
	if isNoRows(err) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := make([]domain.TaskEvent, len(events))
	first := last - int64(len(events)) + 1
	for i, e := range events {
		at := micros(orNow(e.At))
		_, err := tx.ExecContext(ctx, `INSERT INTO task_events (`+taskEventCols+`) VALUES ($1, $2, $3, $4, $5)`,
			taskID, first+int64(i), e.Type, jsonArg(e.Payload), at)
		if err != nil {
			return nil, err
		}
		out[i] = domain.TaskEvent{TaskID: taskID, Seq: first + int64(i), Type: e.Type, At: fromMicros(at), GuestSeq: e.GuestSeq}
		if len(e.Payload) > 0 {
			out[i].Payload = append([]byte(nil), e.Payload...)
		}
	}
	return out, nil
}

// ListTaskEvents implements store.Tasks.
func (s *Store) ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error) {
	q := `SELECT ` + taskEventCols + ` FROM task_events WHERE task_id = $1 AND seq > $2 ORDER BY seq`
	args := []any{taskID, afterSeq}
	if limit > 0 {
		q, args = q+` LIMIT $3`, append(args, limit)
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of task %s: %w", taskID, err)
	}
	out, err := collect(rows, scanTaskEvent)
	if err != nil {
		return nil, fmt.Errorf("list events of task %s: %w", taskID, err)
	}
	return out, nil
}

// QueryTaskEvents implements store.Tasks.
func (s *Store) QueryTaskEvents(ctx context.Context, taskID domain.TaskID, q store.TaskEventQuery) ([]domain.TaskEvent, error) {
	action := "query events of task " + string(taskID)
	if q.Limit < 1 || q.Limit > store.MaxTaskEventPage || len(q.Types) > store.MaxTaskEventTypes {
		return nil, fmt.Errorf("%s: %w: a page holds 1 to %d events (asked %d) of at most %d types (asked %d)",
			action, domain.ErrInvalid, store.MaxTaskEventPage, q.Limit, store.MaxTaskEventTypes, len(q.Types))
	}
	sql := `SELECT ` + taskEventCols + ` FROM task_events WHERE task_id = $1 AND seq > $2`
	args := []any{taskID, q.AfterSeq}
	if q.BeforeSeq > 0 {
		args = append(args, q.BeforeSeq)
		sql += fmt.Sprintf(" AND seq < $%d", len(args))
	}
	if len(q.Types) > 0 {
		sql += " AND type IN (" + placeholders(len(args)+1, len(q.Types)) + ")"
		for _, t := range q.Types {
			args = append(args, t)
		}
	}
	order := "seq"
	if q.Newest {
		order = "seq DESC"
	}
	args = append(args, q.Limit)
	rows, err := s.read.QueryContext(ctx, sql+fmt.Sprintf(" ORDER BY %s LIMIT $%d", order, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	out, err := collect(rows, scanTaskEvent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}
