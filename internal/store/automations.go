package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// RunPatch is what a run's state change also records; zero fields are left
// as they are.
type RunPatch struct {
	Error     string
	StartedAt time.Time
	EndedAt   time.Time
}

// RunCaps bound an automation's runs; zero is no bound. Active runs are
// queued, running or waiting; the hour counts the runs created in the
// hour before the new one that were not skipped or refused.
type RunCaps struct {
	MaxActive  int
	MaxPerHour int
	// Superseding names the concurrency key whose active runs the new one
	// ends (policy supersede): they do not count to MaxActive.
	Superseding string
}

// Automations keeps automations, their versions, their runs and each run's
// step record.
type Automations interface {
	// CreateAutomation inserts a (a.Org required) at version 1 with def
	// and, when a.HookSecret is set, its sealed secret; ErrConflict if the
	// name or slug is taken (in the deployment: names and slugs are unique
	// across organisations).
	CreateAutomation(ctx context.Context, a domain.Automation, def []byte) (domain.Automation, error)
	// UpdateAutomation saves def as the next version while the automation
	// is still at expectVersion (ErrConflict otherwise), with a's trigger
	// kind, slug and name. A set a.HookSecret replaces the sealed secret.
	UpdateAutomation(ctx context.Context, a domain.Automation, def []byte, expectVersion int64) (domain.Automation, error)
	SetAutomationEnabled(ctx context.Context, id domain.AutomationID, enabled bool, at time.Time) (domain.Automation, error)
	GetAutomation(ctx context.Context, id domain.AutomationID) (domain.Automation, error)
	// GetAutomationByName finds org's automation with that name.
	GetAutomationByName(ctx context.Context, org domain.OrgID, name string) (domain.Automation, error)
	GetAutomationBySlug(ctx context.Context, slug string) (domain.Automation, error)
	// ListAutomations lists org's by name (org "" lists every
	// organisation's: the scheduler's view); a non-empty triggerKind lists
	// only the enabled automations with that trigger.
	ListAutomations(ctx context.Context, org domain.OrgID, triggerKind string) ([]domain.Automation, error)
	GetAutomationVersion(ctx context.Context, id domain.AutomationID, version int64) (domain.AutomationVersion, error)
	DeleteAutomation(ctx context.Context, id domain.AutomationID) error

	// CreateRun inserts r (r.Org, its automation's, required) unless the automation has a run with r.DedupKey:
	// then it returns that run and created false.
	CreateRun(ctx context.Context, r domain.AutomationRun) (run domain.AutomationRun, created bool, err error)
	// CreateCappedRun is CreateRun under the automation's caps, judged in
	// the same transaction (one at a time per automation, on every
	// replica): over a cap, r is recorded as skipped, saying which.
	CreateCappedRun(ctx context.Context, r domain.AutomationRun, caps RunCaps) (run domain.AutomationRun, created bool, err error)
	// TransitionRun moves a run from one state to another; ErrConflict if
	// it is no longer in from.
	TransitionRun(ctx context.Context, id domain.AutomationRunID, from, to domain.RunState, p RunPatch, at time.Time) (domain.AutomationRun, error)
	GetRun(ctx context.Context, id domain.AutomationRunID) (domain.AutomationRun, error)
	// GetRunByDedupKey is the automation's run with the dedup key.
	GetRunByDedupKey(ctx context.Context, id domain.AutomationID, key string) (domain.AutomationRun, error)
	// ListRuns lists an automation's runs newest first, after the run
	// before ("" from the newest), at most limit.
	ListRuns(ctx context.Context, id domain.AutomationID, before domain.AutomationRunID, limit int) ([]domain.AutomationRun, error)
	// QueuedRuns lists up to limit runs still queued that were created
	// before createdBefore, oldest first, across automations.
	QueuedRuns(ctx context.Context, createdBefore time.Time, limit int) ([]domain.AutomationRun, error)
	// ActiveRuns lists the automation's runs with the concurrency key that
	// are queued, running or waiting, oldest first.
	ActiveRuns(ctx context.Context, id domain.AutomationID, key string) ([]domain.AutomationRun, error)

	// BeginStep records that a step starts: a new row at attempt 1, or the
	// next attempt of the row at (RunID, Seq) (the block ran before a
	// crash). It returns the attempt.
	BeginStep(ctx context.Context, s domain.RunStep) (attempt int64, err error)
	// EndStep records a step's end: state, output, error, time.
	EndStep(ctx context.Context, s domain.RunStep) error
	ListSteps(ctx context.Context, id domain.AutomationRunID) ([]domain.RunStep, error)

	// ExecutorHeartbeat stamps a replica running automation workflows.
	ExecutorHeartbeat(ctx context.Context, executorID string, at time.Time) error
	// TakeStaleExecutor removes one executor whose heartbeat is before
	// staleBefore and returns its id, or "" when none is stale: the caller
	// recovers its runs, and no other replica gets the same one.
	TakeStaleExecutor(ctx context.Context, staleBefore time.Time) (string, error)
}
