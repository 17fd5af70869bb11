package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// IngestTaskEvents implements store.Tasks. The no-op update of the task row
// comes first: it locks the row (Postgres; SQLite has one writer), so two
// ingests of one session run one after the other and neither appends an
// event the other took, and the quota sees every event before it.
func (s *Store) IngestTaskEvents(ctx context.Context, in store.TaskIngest) (store.TaskIngested, error) {
	action := fmt.Sprintf("ingest %d events of session %s into task %s", len(in.Events), in.SessionID, in.TaskID)
	if in.TaskID == "" || in.SessionID == "" {
		return store.TaskIngested{}, errors.New("ingest task events: task id and session id are required")
	}
	if err := checkTaskEvents(action, in.Events); err != nil {
		return store.TaskIngested{}, err
	}
	for kind, n := range in.Quota.Notes {
		if err := checkTaskEvents(action+": note "+kind, []domain.TaskEvent{n}); err != nil {
			return store.TaskIngested{}, err
		}
	}
	for i := 1; i < len(in.Events); i++ {
		if in.Events[i].GuestSeq <= in.Events[i-1].GuestSeq {
			return store.TaskIngested{}, fmt.Errorf("%s: guest seqs must increase, got %d after %d", action, in.Events[i].GuestSeq, in.Events[i-1].GuestSeq)
		}
	}
	var out store.TaskIngested
	err := s.inTx(ctx, func(tx execer) error {
		var err error
		out, err = ingestTx(ctx, tx, in)
		return err
	})
	if err != nil {
		return store.TaskIngested{}, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// taskTally is what a task's quota is measured against.
type taskTally struct {
	seq, bytes int64
	noted      string // the quota kinds the task had its note of, comma-separated
}

func ingestTx(ctx context.Context, tx execer, in store.TaskIngest) (store.TaskIngested, error) {
	var t taskTally
	err := tx.QueryRowContext(ctx, `UPDATE tasks SET event_seq = event_seq WHERE id = $1
		RETURNING event_seq, event_bytes, quota_noted`, in.TaskID).Scan(&t.seq, &t.bytes, &t.noted)
	if isNoRows(err) {
		return store.TaskIngested{}, fmt.Errorf("task %s: %w", in.TaskID, store.ErrNotFound)
	}
	if err != nil {
		return store.TaskIngested{}, err
	}
	var seq, cursor int64
	err = tx.QueryRowContext(ctx, `SELECT seq, guest_cursor FROM task_sessions WHERE task_id = $1 AND session_id = $2
		ORDER BY seq DESC LIMIT 1`, in.TaskID, in.SessionID).Scan(&seq, &cursor)
	if isNoRows(err) {
		return store.TaskIngested{}, fmt.Errorf("session %s is not one of the task's: %w", in.SessionID, store.ErrNotFound)
	}
	if err != nil {
		return store.TaskIngested{}, err
	}
	from := cursor
	if in.RewoundTo != nil && *in.RewoundTo >= 0 && *in.RewoundTo < cursor {
		cursor = *in.RewoundTo
	}
	var fresh []domain.TaskEvent
	for _, e := range in.Events {
		if e.GuestSeq > cursor {
			fresh = append(fresh, e)
		}
	}
	out := store.TaskIngested{Cursor: cursor}
	if len(fresh) > 0 {
		n, dropped := admitEvents(in.Quota, t, fresh)
		notes, noted := quotaNotes(in.Quota, t.noted, dropped)
		if evs := append(fresh[:n:n], notes...); len(evs) > 0 {
			if out.Added, err = insertTaskEvents(ctx, tx, in.TaskID, evs); err != nil {
				return store.TaskIngested{}, err
			}
		}
		if noted != t.noted {
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET quota_noted = $2 WHERE id = $1`, in.TaskID, noted); err != nil {
				return store.TaskIngested{}, err
			}
		}
		out.Dropped = dropped
		out.Cursor = fresh[len(fresh)-1].GuestSeq
	}
	if out.Cursor == from {
		return out, nil
	}
	_, err = tx.ExecContext(ctx, `UPDATE task_sessions SET guest_cursor = $3 WHERE task_id = $1 AND seq = $2`,
		in.TaskID, seq, out.Cursor)
	return out, err
}

// admitEvents is how many of the fresh events q takes on top of what the
// task has (t), and how many it drops under which bound (nil: none).
func admitEvents(q store.TaskQuota, t taskTally, fresh []domain.TaskEvent) (int, map[string]int) {
	n, by := 0, ""
	seq, bytes := t.seq, t.bytes
	for _, e := range fresh {
		if q.MaxEvents > 0 && seq+1 > q.MaxEvents {
			by = store.QuotaEvents
			break
		}
		if q.MaxBytes > 0 && bytes+e.Bytes() > q.MaxBytes {
			by = store.QuotaBytes
			break
		}
		seq, bytes, n = seq+1, bytes+e.Bytes(), n+1
	}
	var dropped map[string]int
	if by != "" {
		dropped = map[string]int{by: len(fresh) - n}
	}
	if q.Admit != nil && n > max(*q.Admit, 0) {
		if dropped == nil {
			dropped = map[string]int{}
		}
		dropped[store.QuotaRate], n = n-max(*q.Admit, 0), max(*q.Admit, 0)
	}
	return n, dropped
}

// quotaNotes are the notes q gives for what was dropped, and the kinds the
// task has had its note of after them (a task's events and bytes quotas
// are noted once).
func quotaNotes(q store.TaskQuota, noted string, dropped map[string]int) ([]domain.TaskEvent, string) {
	var out []domain.TaskEvent
	kinds := strings.FieldsFunc(noted, func(r rune) bool { return r == ',' })
	for _, kind := range []string{store.QuotaEvents, store.QuotaBytes} {
		note, ok := q.Notes[kind]
		if dropped[kind] == 0 || !ok || slices.Contains(kinds, kind) {
			continue
		}
		out, kinds = append(out, note), append(kinds, kind)
	}
	if note, ok := q.Notes[store.QuotaRate]; ok && dropped[store.QuotaRate] > 0 {
		out = append(out, note)
	}
	return out, strings.Join(kinds, ",")
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
// task row locks it, so of concurrent replacers one wins, and a stop that
// lands first is never undone.
func (s *Store) ReplaceSession(ctx context.Context, taskID domain.TaskID, from []domain.TaskState, oldSessionID, newSessionID domain.SessionID, at time.Time) (domain.TaskSession, error) {
	action := fmt.Sprintf("replace session %s of task %s with %s", oldSessionID, taskID, newSessionID)
	if taskID == "" || newSessionID == "" || oldSessionID == newSessionID || len(from) == 0 {
		return domain.TaskSession{}, fmt.Errorf("%s: task id, a new session id and a state to move from are required", action)
	}
	stamp := micros(orNow(at))
	args := []any{taskID, oldSessionID, newSessionID, string(domain.TaskStarting), stamp}
	for _, f := range from {
		args = append(args, string(f))
	}
	var out domain.TaskSession
	err := s.inTx(ctx, func(tx execer) error {
		res, err := tx.ExecContext(ctx, `UPDATE tasks SET session_id = $3, state = $4, error = '', updated_at = $5
			WHERE id = $1 AND session_id = $2 AND state IN (`+placeholders(6, len(from))+`)`, args...)
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

// addTaskUsage adds the usage the events carry (TaskEvent.Usage) to their
// task's sums, in the transaction that appends them: an event is summed
// exactly when it is stored. A cost in another currency than the task's
// first is not summed but counted as not priced.
func addTaskUsage(ctx context.Context, tx execer, taskID domain.TaskID, events []domain.TaskEvent) error {
	var cur string
	err := tx.QueryRowContext(ctx, `SELECT cost_currency FROM tasks WHERE id = $1`, taskID).Scan(&cur)
	if err != nil {
		return err
	}
	var sum domain.TaskUsage
	seen := false
	for _, e := range events {
		u := e.Usage
		if u == nil {
			continue
		}
		seen = true
		sum.Tokens = sum.Tokens.Add(u.Tokens)
		if u.Model != "" {
			sum.Model = u.Model
		}
		switch {
		case u.Cost.Currency != "" && (cur == "" || cur == u.Cost.Currency):
			cur, sum.Cost.Micros = u.Cost.Currency, sum.Cost.Micros+u.Cost.Micros
		case u.Tokens != (domain.Tokens{}):
			sum.Unpriced++
		}
	}
	if !seen {
		return nil
	}
	t := sum.Tokens
	_, err = tx.ExecContext(ctx, `UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
		cache_read_tokens = cache_read_tokens + $4, cache_write_tokens = cache_write_tokens + $5,
		cost_micros = cost_micros + $6, cost_currency = $7, unpriced_usages = unpriced_usages + $8,
		usage_model = CASE WHEN $9 = '' THEN usage_model ELSE $9 END WHERE id = $1`,
		taskID, t.Input, t.Output, t.CacheRead, t.CacheWrite, sum.Cost.Micros, cur, sum.Unpriced, sum.Model)
	return err
}
