package autorun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	// DBOS opens SQLite through a driver this package registers in its init;
	// it has no other way in, so this is the module's one blank import.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/tasks"
)

// Config says where runs are kept and how they are bounded.
type Config struct {
	// ExecutorID names this replica among those running workflows.
	ExecutorID string
	// SQLitePath or PostgresURL is the database the store uses: DBOS keeps
	// its tables there too (on Postgres in DBOSSchema, default "dbos").
	SQLitePath  string
	PostgresURL string
	DBOSSchema  string
	// Heartbeat is how often this replica says it runs workflows (default
	// 10s); StaleAfter is how long a replica may be silent before another
	// takes over its runs (default 1m).
	Heartbeat  time.Duration
	StaleAfter time.Duration
	// ScheduleEvery is how often schedules are checked (default 10s).
	ScheduleEvery time.Duration
	// Limits bound definitions (default automations.DefaultLimits).
	Limits automations.Limits
	// MaxStepOutput is the bytes kept of a step's output (default 64 KiB).
	MaxStepOutput int
	// QueuePoll is how often a queue of runs waiting for their
	// concurrency key is polled (default 250ms).
	QueuePoll time.Duration
	// LibraryLogLevel is the least level of the durable-execution
	// library's own log lines (DBOS's; nil: warn). Ours follow Logger.
	LibraryLogLevel slog.Leveler
}

func (c *Config) defaults() error {
	if c.ExecutorID == "" {
		return errors.New("autorun config: ExecutorID is required")
	}
	if (c.SQLitePath == "") == (c.PostgresURL == "") {
		return errors.New("autorun config: exactly one of SQLitePath and PostgresURL is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Heartbeat, 10*time.Second)
	def(&c.StaleAfter, time.Minute)
	def(&c.ScheduleEvery, 10*time.Second)
	def(&c.QueuePoll, 250*time.Millisecond)
	if c.Limits == (automations.Limits{}) {
		c.Limits = automations.DefaultLimits()
	}
	if c.MaxStepOutput <= 0 {
		c.MaxStepOutput = 64 << 10
	}
	if c.LibraryLogLevel == nil {
		c.LibraryLogLevel = slog.LevelWarn
	}
	if c.DBOSSchema == "" {
		c.DBOSSchema = "dbos"
	}
	return nil
}

// Store is what runs are kept in (the store).
type Store interface {
	store.Automations
	Notify(ctx context.Context, topic string) error
	// GetIntegration says which organisation holds the integration whose
	// events trigger runs.
	GetIntegration(ctx context.Context, kind domain.IntegrationKind) (domain.Integration, error)
	// GetMember is whose grants a run started by hand holds.
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
}

// TaskControl starts and steers tasks (tasks.Tasks).
type TaskControl interface {
	StartTask(ctx context.Context, req tasks.StartTaskRequest) (domain.Task, error)
	SendTask(ctx context.Context, id domain.TaskID, text string) (domain.TaskEvent, error)
	StopTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
}

// TaskReads are the task rows blocks wait on (the store).
type TaskReads interface {
	GetTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error)
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// Guests reach a session's guest daemon (the coordinator).
type Guests interface {
	Guest(ctx context.Context, id domain.SessionID) (coordinator.GuestTarget, error)
}

// Sealer seals hook secrets at rest (secret.Sealer).
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Deps are the collaborators of a Runner.
type Deps struct {
	Store     Store
	Tasks     TaskControl
	TaskReads TaskReads
	Guests    Guests
	Sealer    Sealer // nil: webhook triggers are refused (no secret can be kept)
	// Integrations execute the block kinds they declare (post_slack,
	// github_review, ...); those that follow the tasks their runs start
	// (connector.TaskFollower) hear of each. A block of a kind none
	// declares fails.
	Integrations []connector.Blocks
	Logger       *slog.Logger
	Now          func() time.Time // the clock of schedules and records
	NewID        func() string
}

// Runner keeps automations and runs them.
type Runner struct {
	cfg   Config
	st    Store
	tasks TaskControl
	reads TaskReads
	guest Guests
	seal  Sealer
	kinds map[string]connector.Blocks // block kind -> the integration that executes it
	ins   []connector.Blocks
	log   *slog.Logger
	now   func() time.Time
	newID func() string

	dbos   dbos.Context
	keyedQ dbos.Queue // runs that wait for their concurrency key, one at a time per key

	mu       sync.Mutex
	launched bool
}

// Open connects DBOS to the database (creating its tables), registers the
// run workflow and returns a Runner; Run starts executing. ctx carries
// values only: DBOS outlives it.
func Open(ctx context.Context, cfg Config, deps Deps) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("autorun: Store is required")
	}
	r := &Runner{cfg: cfg, st: deps.Store, tasks: deps.Tasks, reads: deps.TaskReads, guest: deps.Guests, seal: deps.Sealer, ins: deps.Integrations,
		kinds: map[string]connector.Blocks{}, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	for _, in := range deps.Integrations {
		for _, k := range in.BlockKinds() {
			r.kinds[k] = in
		}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.newID == nil {
		return nil, errors.New("autorun: NewID is required")
	}
	dc := dbos.Config{AppName: "engrams", ExecutorID: cfg.ExecutorID, ApplicationVersion: workflowVersion,
		Logger: slog.New(floorHandler{h: r.log.With("part", "dbos").Handler(), min: cfg.LibraryLogLevel}), DatabaseSchema: cfg.DBOSSchema}
	if cfg.PostgresURL != "" {
		dc.DatabaseURL = cfg.PostgresURL
	} else {
		dc.DatabaseURL = "sqlite:" + cfg.SQLitePath
	}
	// DBOS's context lives as long as the Runner: it must not end with
	// ctx. Connecting is bounded by SystemDBStartupTimeout (2 minutes).
	d, err := dbos.NewContext(context.WithoutCancel(ctx), dc)
	if err != nil {
		return nil, fmt.Errorf("open automation runs: %w", err)
	}
	dbos.RegisterWorkflow(d, r.runWorkflow, dbos.WithWorkflowName(workflowName))
	q, err := dbos.RegisterQueue(d, keyedQueue, dbos.WithPartitionConcurrency(1), dbos.WithQueueBasePollingInterval(cfg.QueuePoll),
		dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate))
	if err != nil {
		_ = dbos.Shutdown(d, time.Second)
		return nil, fmt.Errorf("open automation runs: register queue: %w", err)
	}
	r.dbos, r.keyedQ = d, q
	return r, nil
}

const (
	workflowName = "automation_run"
	keyedQueue   = "automation_runs_keyed"
	// workflowVersion is the version of the run workflow's step sequence:
	// every replica recovers runs of this version. Change it only with a
	// change in which steps a run records, in what order.
	workflowVersion = "engrams-run-1"
)

// Run launches DBOS (recovering this executor's unfinished runs), then
// heartbeats, takes over the runs of replicas that died and fires
// schedules, until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	if err := dbos.Launch(r.dbos); err != nil {
		return fmt.Errorf("launch automation runs: %w", err)
	}
	r.mu.Lock()
	r.launched = true
	r.mu.Unlock()
	r.log.Info("automation runs launched", "executor_id", r.cfg.ExecutorID)
	r.sweepQueued(ctx, r.now()) // runs recorded before the launch, here or on a replica that died
	var wg sync.WaitGroup
	wg.Go(func() { r.recoverLoop(ctx) })
	wg.Go(func() { r.scheduleLoop(ctx) })
	wg.Wait()
	if err := dbos.Shutdown(r.dbos, 10*time.Second); err != nil {
		return fmt.Errorf("shut automation runs down: %w", err)
	}
	return nil
}

// Close releases DBOS when Run was never called.
func (r *Runner) Close() error {
	r.mu.Lock()
	launched := r.launched
	r.mu.Unlock()
	if launched {
		return nil
	}
	return dbos.Shutdown(r.dbos, time.Second)
}
