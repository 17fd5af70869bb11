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

// maxRunPage bounds one ListRuns page.
const maxRunPage = 500

const automationSelect = `SELECT a.id, a.org_id, a.name, a.enabled, a.version, a.trigger_kind, a.hook_slug, h.sealed, a.created_at, a.updated_at
	FROM automations a LEFT JOIN hook_secrets h ON h.id = a.id`

func scanAutomation(r scanner) (domain.Automation, error) {
	var a domain.Automation
	var slug sql.NullString
	var created, updated int64
	if err := r.Scan(&a.ID, &a.Org, &a.Name, &a.Enabled, &a.Version, &a.TriggerKind, &slug, &a.HookSecret, &created, &updated); err != nil {
		return domain.Automation{}, err
	}
	a.HookSlug, a.CreatedAt, a.UpdatedAt = slug.String, fromMicros(created), fromMicros(updated)
	return a, nil
}

// nullText stores "" as NULL, for columns unique only when set.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func checkAutomation(a domain.Automation, def []byte) error {
	if a.ID == "" || a.Org == "" || a.Name == "" || a.TriggerKind == "" {
		return errors.New("automation id, organisation, name and trigger kind are required")
	}
	if len(def) == 0 {
		return errors.New("a definition is required")
	}
	return checkJSON("definition", def)
}

// CreateAutomation implements store.Automations.
func (s *Store) CreateAutomation(ctx context.Context, a domain.Automation, def []byte) (domain.Automation, error) {
	action := "create automation " + a.Name
	if err := checkAutomation(a, def); err != nil {
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	at := micros(orNow(a.CreatedAt))
	err := s.inTx(ctx, func(tx execer) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO automations (id, org_id, name, enabled, version, trigger_kind, hook_slug, created_at, updated_at)
			VALUES ($1, $7, $2, $3, 1, $4, $5, $6, $6)`, a.ID, a.Name, a.Enabled, a.TriggerKind, nullText(a.HookSlug), at, string(a.Org)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO automation_versions (automation_id, version, definition, created_at)
			VALUES ($1, 1, $2, $3)`, a.ID, string(def), at); err != nil {
			return err
		}
		return putHookSecret(ctx, tx, a.ID, a.HookSecret, at)
	})
	if s.isUnique(err) {
		return domain.Automation{}, fmt.Errorf("%s: %w: its id, name or hook slug is already used", action, store.ErrConflict)
	}
	if err != nil {
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	return s.GetAutomation(ctx, a.ID)
}

// putHookSecret inserts or replaces an automation's sealed hook secret;
// nil leaves it as it is.
func putHookSecret(ctx context.Context, tx execer, id domain.AutomationID, sealed []byte, at int64) error {
	if len(sealed) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO hook_secrets (id, sealed, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed, created_at = excluded.created_at`, id, sealed, at)
	return err
}

// UpdateAutomation implements store.Automations: the version check and
// the new version are one transaction.
func (s *Store) UpdateAutomation(ctx context.Context, a domain.Automation, def []byte, expectVersion int64) (domain.Automation, error) {
	action := fmt.Sprintf("update automation %s at version %d", a.ID, expectVersion)
	if err := checkAutomation(a, def); err != nil {
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	at := micros(orNow(a.UpdatedAt))
	err := s.inTx(ctx, func(tx execer) error {
		res, err := tx.ExecContext(ctx, `UPDATE automations SET name = $2, version = version + 1, trigger_kind = $3, hook_slug = $4, updated_at = $5
			WHERE id = $1 AND version = $6`, a.ID, a.Name, a.TriggerKind, nullText(a.HookSlug), at, expectVersion)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = s.whyAutomationUnchanged(ctx, tx, a.ID)
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO automation_versions (automation_id, version, definition, created_at)
			VALUES ($1, $2, $3, $4)`, a.ID, expectVersion+1, string(def), at); err != nil {
			return err
		}
		return putHookSecret(ctx, tx, a.ID, a.HookSecret, at)
	})
	if s.isUnique(err) {
		return domain.Automation{}, fmt.Errorf("%s: %w: its name or hook slug is already used", action, store.ErrConflict)
	}
	if err != nil {
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	return s.GetAutomation(ctx, a.ID)
}

func (s *Store) whyAutomationUnchanged(ctx context.Context, tx execer, id domain.AutomationID) error {
	var version int64
	err := tx.QueryRowContext(ctx, `SELECT version FROM automations WHERE id = $1`, id).Scan(&version)
	if isNoRows(err) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: now at version %d", store.ErrConflict, version)
}

// SetAutomationEnabled implements store.Automations.
func (s *Store) SetAutomationEnabled(ctx context.Context, id domain.AutomationID, enabled bool, at time.Time) (domain.Automation, error) {
	action := fmt.Sprintf("set automation %s enabled=%t", id, enabled)
	res, err := s.write.ExecContext(ctx, `UPDATE automations SET enabled = $2, updated_at = $3 WHERE id = $1`, id, enabled, micros(orNow(at)))
	if err != nil {
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err == nil {
			err = store.ErrNotFound
		}
		return domain.Automation{}, fmt.Errorf("%s: %w", action, err)
	}
	return s.GetAutomation(ctx, id)
}

// GetAutomation implements store.Automations.
func (s *Store) GetAutomation(ctx context.Context, id domain.AutomationID) (domain.Automation, error) {
	a, err := scanAutomation(s.read.QueryRowContext(ctx, automationSelect+` WHERE a.id = $1`, id))
	return a, rowFound(err, fmt.Sprintf("get automation %s", id))
}

// GetAutomationByName implements store.Automations.
func (s *Store) GetAutomationByName(ctx context.Context, org domain.OrgID, name string) (domain.Automation, error) {
	a, err := scanAutomation(s.read.QueryRowContext(ctx, automationSelect+` WHERE a.org_id = $1 AND a.name = $2`, string(org), name))
	return a, rowFound(err, "get automation named "+name)
}

// GetAutomationBySlug implements store.Automations.
func (s *Store) GetAutomationBySlug(ctx context.Context, slug string) (domain.Automation, error) {
	a, err := scanAutomation(s.read.QueryRowContext(ctx, automationSelect+` WHERE a.hook_slug = $1`, slug))
	return a, rowFound(err, "get automation with hook "+slug)
}

// ListAutomations implements store.Automations.
func (s *Store) ListAutomations(ctx context.Context, org domain.OrgID, triggerKind string) ([]domain.Automation, error) {
	q := automationSelect + ` WHERE (CAST($1 AS TEXT) = '' OR a.org_id = $1)`
	args := []any{string(org)}
	if triggerKind != "" {
		q, args = q+` AND a.trigger_kind = $2 AND a.enabled = $3`, append(args, triggerKind, true)
	}
	q += ` ORDER BY a.name`
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list automations: %w", err)
	}
	out, err := collect(rows, scanAutomation)
	if err != nil {
		return nil, fmt.Errorf("list automations: %w", err)
	}
	return out, nil
}

// GetAutomationVersion implements store.Automations.
func (s *Store) GetAutomationVersion(ctx context.Context, id domain.AutomationID, version int64) (domain.AutomationVersion, error) {
	v := domain.AutomationVersion{AutomationID: id, Version: version}
	var def string
	var created int64
	err := s.read.QueryRowContext(ctx, `SELECT definition, created_at FROM automation_versions WHERE automation_id = $1 AND version = $2`,
		id, version).Scan(&def, &created)
	v.Definition, v.CreatedAt = []byte(def), fromMicros(created)
	return v, rowFound(err, fmt.Sprintf("get automation %s version %d", id, version))
}

// DeleteAutomation implements store.Automations: its versions, runs and
// steps go with it.
func (s *Store) DeleteAutomation(ctx context.Context, id domain.AutomationID) error {
	action := fmt.Sprintf("delete automation %s", id)
	err := s.inTx(ctx, func(tx execer) error {
		// SQLite enforces the cascade only with foreign keys on; delete in
		// order so both dialects agree either way.
		for _, q := range []string{
			`DELETE FROM automation_steps WHERE run_id IN (SELECT id FROM automation_runs WHERE automation_id = $1)`,
			`DELETE FROM automation_runs WHERE automation_id = $1`,
			`DELETE FROM automation_versions WHERE automation_id = $1`,
			`DELETE FROM hook_secrets WHERE id = $1`,
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM automations WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = store.ErrNotFound
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

const runCols = `id, automation_id, org_id, version, state, trigger_kind, dedup_key, concurrency_key, trigger_payload, inputs, error,
	created_at, started_at, ended_at, updated_at, actor_id`

func scanRun(r scanner) (domain.AutomationRun, error) {
	var run domain.AutomationRun
	var dedup, payload, inputs sql.NullString
	var created, started, ended, updated int64
	if err := r.Scan(&run.ID, &run.AutomationID, &run.Org, &run.Version, &run.State, &run.TriggerKind, &dedup, &run.ConcurrencyKey,
		&payload, &inputs, &run.Error, &created, &started, &ended, &updated, &run.ActorID); err != nil {
		return domain.AutomationRun{}, err
	}
	run.DedupKey, run.Trigger, run.Inputs = dedup.String, fromJSON(payload), fromJSON(inputs)
	run.CreatedAt, run.StartedAt, run.EndedAt, run.UpdatedAt = fromMicros(created), fromMicros(started), fromMicros(ended), fromMicros(updated)
	return run, nil
}

// CreateRun implements store.Automations: the dedup key's unique index
// arbitrates between replicas that got the same delivery.
func (s *Store) CreateRun(ctx context.Context, r domain.AutomationRun) (domain.AutomationRun, bool, error) {
	var run domain.AutomationRun
	var created bool
	err := s.inTx(ctx, func(tx execer) (err error) {
		run, created, err = insertRun(ctx, tx, r)
		return err
	})
	return run, created, err
}

// CreateCappedRun implements store.Automations. The automation's row is
// written first, so the transactions of one automation take turns (a row
// lock on Postgres, the write lock on SQLite) and two deliveries at once
// cannot both see room under a cap.
func (s *Store) CreateCappedRun(ctx context.Context, r domain.AutomationRun, caps store.RunCaps) (domain.AutomationRun, bool, error) {
	var run domain.AutomationRun
	var created bool
	err := s.inTx(ctx, func(tx execer) error {
		if caps.MaxActive > 0 || caps.MaxPerHour > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE automations SET updated_at = updated_at WHERE id = $1`, r.AutomationID); err != nil {
				return fmt.Errorf("create run of automation %s: %w", r.AutomationID, err)
			}
			why, err := overCap(ctx, tx, r, caps)
			if err != nil {
				return fmt.Errorf("create run of automation %s: count its runs: %w", r.AutomationID, err)
			}
			if why != "" && !r.State.Terminal() {
				r.State, r.Error, r.EndedAt = domain.RunSkipped, why, orNow(r.CreatedAt)
			}
		}
		var err error
		run, created, err = insertRun(ctx, tx, r)
		return err
	})
	return run, created, err
}

// overCap says which of caps a new run r would go over ("" for none).
func overCap(ctx context.Context, tx execer, r domain.AutomationRun, caps store.RunCaps) (string, error) {
	if caps.MaxActive > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM automation_runs WHERE automation_id = $1 AND state IN ($2, $3, $4)
			AND (CAST($5 AS TEXT) = '' OR concurrency_key <> $5)`,
			r.AutomationID, domain.RunQueued, domain.RunRunning, domain.RunWaiting, caps.Superseding).Scan(&n); err != nil {
			return "", err
		}
		if n >= caps.MaxActive {
			return fmt.Sprintf("cap reached: %d runs are active, at most %d at once (settings.max_concurrent)", n, caps.MaxActive), nil
		}
	}
	if caps.MaxPerHour > 0 {
		var n int
		since := orNow(r.CreatedAt).Add(-time.Hour)
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM automation_runs WHERE automation_id = $1 AND created_at > $2
			AND state NOT IN ($3, $4)`, r.AutomationID, micros(since), domain.RunSkipped, domain.RunRefused).Scan(&n); err != nil {
			return "", err
		}
		if n >= caps.MaxPerHour {
			return fmt.Sprintf("cap reached: %d runs in the last hour, at most %d (settings.max_per_hour)", n, caps.MaxPerHour), nil
		}
	}
	return "", nil
}

// insertRun inserts r unless its automation has a run with its dedup key,
// which it then returns.
func insertRun(ctx context.Context, tx execer, r domain.AutomationRun) (domain.AutomationRun, bool, error) {
	action := fmt.Sprintf("create run of automation %s", r.AutomationID)
	if r.ID == "" || r.AutomationID == "" || r.Org == "" || r.Version < 1 || r.State == "" {
		return domain.AutomationRun{}, false, fmt.Errorf("%s: id, automation, organisation, version and state are required", action)
	}
	if err := errors.Join(checkJSON("trigger", r.Trigger), checkJSON("inputs", r.Inputs)); err != nil {
		return domain.AutomationRun{}, false, fmt.Errorf("%s: %w", action, err)
	}
	at := micros(orNow(r.CreatedAt))
	run, err := scanRun(tx.QueryRowContext(ctx, `INSERT INTO automation_runs (`+runCols+`)
		VALUES ($1, $2, $15, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $11, $14)
		ON CONFLICT (automation_id, dedup_key) DO NOTHING RETURNING `+runCols,
		r.ID, r.AutomationID, r.Version, r.State, r.TriggerKind, nullText(r.DedupKey), r.ConcurrencyKey,
		jsonArg(r.Trigger), jsonArg(r.Inputs), r.Error, at, micros(r.StartedAt), micros(r.EndedAt), r.ActorID, string(r.Org)))
	if err == nil {
		return run, true, nil
	}
	if !isNoRows(err) {
		return domain.AutomationRun{}, false, fmt.Errorf("%s: %w", action, err)
	}
	run, err = scanRun(tx.QueryRowContext(ctx, `SELECT `+runCols+` FROM automation_runs
		WHERE automation_id = $1 AND dedup_key = $2`, r.AutomationID, r.DedupKey))
	if err != nil {
		return domain.AutomationRun{}, false, fmt.Errorf("%s: read the run of dedup key %q: %w", action, r.DedupKey, err)
	}
	return run, false, nil
}

// TransitionRun implements store.Automations.
func (s *Store) TransitionRun(ctx context.Context, id domain.AutomationRunID, from, to domain.RunState, p store.RunPatch, at time.Time) (domain.AutomationRun, error) {
	action := fmt.Sprintf("move run %s from %s to %s", id, from, to)
	run, err := scanRun(s.write.QueryRowContext(ctx, `UPDATE automation_runs SET state = $3,
		error = CASE WHEN CAST($4 AS TEXT) = '' THEN error ELSE CAST($4 AS TEXT) END,
		started_at = CASE WHEN CAST($5 AS BIGINT) = 0 THEN started_at ELSE CAST($5 AS BIGINT) END,
		ended_at = CASE WHEN CAST($6 AS BIGINT) = 0 THEN ended_at ELSE CAST($6 AS BIGINT) END, updated_at = $7
		WHERE id = $1 AND state = $2 RETURNING `+runCols,
		id, from, to, p.Error, micros(p.StartedAt), micros(p.EndedAt), micros(orNow(at))))
	if isNoRows(err) {
		cur, gerr := s.GetRun(ctx, id)
		if gerr != nil {
			return domain.AutomationRun{}, fmt.Errorf("%s: %w", action, gerr)
		}
		return domain.AutomationRun{}, fmt.Errorf("%s: %w: it is %s", action, store.ErrConflict, cur.State)
	}
	if err != nil {
		return domain.AutomationRun{}, fmt.Errorf("%s: %w", action, err)
	}
	return run, nil
}

// GetRun implements store.Automations.
func (s *Store) GetRun(ctx context.Context, id domain.AutomationRunID) (domain.AutomationRun, error) {
	run, err := scanRun(s.read.QueryRowContext(ctx, `SELECT `+runCols+` FROM automation_runs WHERE id = $1`, id))
	return run, rowFound(err, fmt.Sprintf("get run %s", id))
}

// GetRunByDedupKey implements store.Automations.
func (s *Store) GetRunByDedupKey(ctx context.Context, id domain.AutomationID, key string) (domain.AutomationRun, error) {
	run, err := scanRun(s.read.QueryRowContext(ctx, `SELECT `+runCols+` FROM automation_runs WHERE automation_id = $1 AND dedup_key = $2`, id, key))
	return run, rowFound(err, fmt.Sprintf("get the run of automation %s keyed %q", id, key))
}

// ListRuns implements store.Automations: run ids are UUIDv7, so id order
// is creation order.
func (s *Store) ListRuns(ctx context.Context, id domain.AutomationID, before domain.AutomationRunID, limit int) ([]domain.AutomationRun, error) {
	if limit <= 0 || limit > maxRunPage {
		limit = maxRunPage
	}
	q, args := `SELECT `+runCols+` FROM automation_runs WHERE automation_id = $1 ORDER BY id DESC LIMIT $2`, []any{id, limit}
	if before != "" {
		q, args = `SELECT `+runCols+` FROM automation_runs WHERE automation_id = $1 AND id < $3 ORDER BY id DESC LIMIT $2`, []any{id, limit, before}
	}
	return s.queryRuns(ctx, "list runs of automation "+string(id), q, args...)
}

// QueuedRuns implements store.Automations.
func (s *Store) QueuedRuns(ctx context.Context, createdBefore time.Time, limit int) ([]domain.AutomationRun, error) {
	if limit <= 0 || limit > maxRunPage {
		limit = maxRunPage
	}
	return s.queryRuns(ctx, "list queued runs", `SELECT `+runCols+` FROM automation_runs WHERE state = $1 AND created_at < $2
		ORDER BY created_at, id LIMIT $3`, domain.RunQueued, micros(createdBefore), limit)
}

// ActiveRuns implements store.Automations.
func (s *Store) ActiveRuns(ctx context.Context, id domain.AutomationID, key string) ([]domain.AutomationRun, error) {
	return s.queryRuns(ctx, fmt.Sprintf("list active runs of automation %s with key %q", id, key),
		`SELECT `+runCols+` FROM automation_runs WHERE automation_id = $1 AND concurrency_key = $2 AND state IN ($3, $4, $5) ORDER BY id`,
		id, key, domain.RunQueued, domain.RunRunning, domain.RunWaiting)
}

func (s *Store) queryRuns(ctx context.Context, action, q string, args ...any) ([]domain.AutomationRun, error) {
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	out, err := collect(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

const stepCols = `run_id, seq, block_id, kind, path, state, attempt, input, output, error, started_at, ended_at`

func scanStep(r scanner) (domain.RunStep, error) {
	var st domain.RunStep
	var input sql.NullString
	var started, ended int64
	if err := r.Scan(&st.RunID, &st.Seq, &st.BlockID, &st.Kind, &st.Path, &st.State, &st.Attempt, &input, &st.Output, &st.Error,
		&started, &ended); err != nil {
		return domain.RunStep{}, err
	}
	st.Input, st.StartedAt, st.EndedAt = fromJSON(input), fromMicros(started), fromMicros(ended)
	return st, nil
}

// BeginStep implements store.Automations.
func (s *Store) BeginStep(ctx context.Context, st domain.RunStep) (int64, error) {
	action := fmt.Sprintf("begin step %d of run %s", st.Seq, st.RunID)
	if st.RunID == "" || st.Seq < 1 || st.BlockID == "" {
		return 0, fmt.Errorf("%s: run, seq and block are required", action)
	}
	if err := checkJSON("input", st.Input); err != nil {
		return 0, fmt.Errorf("%s: %w", action, err)
	}
	var attempt int64
	err := s.write.QueryRowContext(ctx, `INSERT INTO automation_steps (run_id, seq, block_id, kind, path, state, attempt, input, started_at)
		VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8)
		ON CONFLICT (run_id, seq) DO UPDATE SET attempt = automation_steps.attempt + 1, state = excluded.state,
			input = excluded.input, started_at = excluded.started_at, ended_at = 0, output = '', error = ''
		RETURNING attempt`,
		st.RunID, st.Seq, st.BlockID, st.Kind, st.Path, domain.StepRunning, jsonArg(st.Input), micros(orNow(st.StartedAt))).Scan(&attempt)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", action, err)
	}
	return attempt, nil
}

// EndStep implements store.Automations.
func (s *Store) EndStep(ctx context.Context, st domain.RunStep) error {
	action := fmt.Sprintf("end step %d of run %s", st.Seq, st.RunID)
	res, err := s.write.ExecContext(ctx, `UPDATE automation_steps SET state = $3, output = $4, error = $5, ended_at = $6
		WHERE run_id = $1 AND seq = $2`, st.RunID, st.Seq, st.State, st.Output, st.Error, micros(orNow(st.EndedAt)))
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err == nil {
			err = store.ErrNotFound
		}
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// ListSteps implements store.Automations.
func (s *Store) ListSteps(ctx context.Context, id domain.AutomationRunID) ([]domain.RunStep, error) {
	action := fmt.Sprintf("list steps of run %s", id)
	rows, err := s.read.QueryContext(ctx, `SELECT `+stepCols+` FROM automation_steps WHERE run_id = $1 ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	out, err := collect(rows, scanStep)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	return out, nil
}

// ExecutorHeartbeat implements store.Automations.
func (s *Store) ExecutorHeartbeat(ctx context.Context, executorID string, at time.Time) error {
	_, err := s.write.ExecContext(ctx, `INSERT INTO automation_executors (id, heartbeat_at) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, executorID, micros(orNow(at)))
	if err != nil {
		return fmt.Errorf("heartbeat automation executor %s: %w", executorID, err)
	}
	return nil
}

// TakeStaleExecutor implements store.Automations: the conditional DELETE
// lets one replica take each stale executor.
func (s *Store) TakeStaleExecutor(ctx context.Context, staleBefore time.Time) (string, error) {
	for range 8 {
		var id string
		err := s.read.QueryRowContext(ctx, `SELECT id FROM automation_executors WHERE heartbeat_at < $1 ORDER BY heartbeat_at LIMIT 1`,
			micros(staleBefore)).Scan(&id)
		if isNoRows(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("find a stale automation executor: %w", err)
		}
		res, err := s.write.ExecContext(ctx, `DELETE FROM automation_executors WHERE id = $1 AND heartbeat_at < $2`, id, micros(staleBefore))
		if err != nil {
			return "", fmt.Errorf("take stale automation executor %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			return id, nil
		}
	}
	return "", nil
}
