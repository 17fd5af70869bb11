package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/domain"
)

// Config shapes the relay.
type Config struct {
	// Owner names this replica's relay leases (the replica id).
	Owner string
	// RelayEvery is how often threads are relayed: a turn's message is
	// edited at most this often (default 1s). Lease is how long a relay
	// holds a thread before another may take it (default 30s).
	RelayEvery time.Duration
	Lease      time.Duration
}

// Store keeps deliveries and threads, and reads tasks' conversations.
type Store interface {
	RecordDelivery(ctx context.Context, source, id string, at, forgetBefore time.Time) (bool, error)
	PutThread(ctx context.Context, t domain.ChatThread) (domain.ChatThread, bool, error)
	GetThread(ctx context.Context, kind domain.IntegrationKind, channel, thread string) (domain.ChatThread, error)
	ClaimThreads(ctx context.Context, owner string, now, until time.Time, limit int) ([]domain.ChatThread, error)
	UpdateThread(ctx context.Context, t domain.ChatThread, owner string) error
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error)
}

// Integrations opens Slack's settings and credentials (integrations.Service).
type Integrations interface {
	Open(ctx context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error)
}

// Runs starts the runs of mention triggers (autorun.Runner).
type Runs interface {
	StartTriggered(ctx context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error)
}

// Tasks takes thread replies (tasks.Tasks).
type Tasks interface {
	SendTask(ctx context.Context, id domain.TaskID, text string) (domain.TaskEvent, error)
}

// Deps are the collaborators of an App.
type Deps struct {
	Store        Store
	Integrations Integrations
	Runs         Runs
	Tasks        Tasks
	HTTP         *http.Client // nil: a client with a 30s timeout
	Logger       *slog.Logger
	Now          func() time.Time
}

// App is the Slack integration of one replica.
type App struct {
	cfg   Config
	st    Store
	ins   Integrations
	tasks Tasks
	http  *http.Client
	log   *slog.Logger
	now   func() time.Time
	mu    sync.Mutex
	runsR Runs // set late: the runner is made after the App (SetRuns)
}

// New returns an App.
func New(cfg Config, deps Deps) (*App, error) {
	if cfg.Owner == "" || deps.Store == nil || deps.Integrations == nil || deps.Tasks == nil {
		return nil, errors.New("slackapp: Owner, Store, Integrations and Tasks are required")
	}
	if cfg.RelayEvery <= 0 {
		cfg.RelayEvery = time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	a := &App{cfg: cfg, st: deps.Store, ins: deps.Integrations, runsR: deps.Runs, tasks: deps.Tasks, http: deps.HTTP, log: deps.Logger, now: deps.Now}
	if a.http == nil {
		a.http = &http.Client{Timeout: 30 * time.Second}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// SetRuns gives the App the runner (made after it: the runner posts
// through the App).
func (a *App) SetRuns(r Runs) {
	a.mu.Lock()
	a.runsR = r
	a.mu.Unlock()
}

func (a *App) starter() Runs {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runsR
}

// settings are Slack's, as configured (integration add slack).
type settings struct {
	APIURL         string            `json:"api_url"`
	Channels       map[string]string `json:"channels"` // channel id -> profile
	DefaultProfile string            `json:"default_profile"`
	DashboardURL   string            `json:"dashboard_url"`
	SocketMode     bool              `json:"socket_mode"`
}

// conf is Slack's settings and credentials, opened now.
type conf struct {
	settings
	bot, signing, app string
}

func (a *App) conf(ctx context.Context) (conf, error) {
	raw, secrets, err := a.ins.Open(ctx, domain.IntegrationSlack)
	if err != nil {
		return conf{}, err
	}
	var c conf
	if err := json.Unmarshal(raw, &c.settings); err != nil {
		return conf{}, fmt.Errorf("decode slack settings: %w", err)
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	c.bot, c.signing, c.app = secrets["bot_token"], secrets["signing_secret"], secrets["app_token"]
	return c, nil
}

func (a *App) web(c conf) web { return web{base: c.APIURL, token: c.bot, http: a.http} }

// Run relays threads and, when Socket Mode is configured, takes events
// over it, until ctx ends.
func (a *App) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { a.relayLoop(ctx) })
	wg.Go(func() { a.socketLoop(ctx) })
	wg.Wait()
	return nil
}

// PostSlack posts text to a channel (in thread when given) once per key:
// a post made before a crash is found by its key and answered instead.
func (a *App) PostSlack(ctx context.Context, channel, thread, text, key string) (string, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	ts, _, err := a.web(c).postOnce(ctx, channel, thread, text, key)
	return ts, err
}

// TaskStarted records that a run triggered by a mention started a task:
// its thread carries the task from now on.
func (a *App) TaskStarted(ctx context.Context, run domain.AutomationRun, task domain.TaskID) error {
	if run.TriggerKind != string(automations.TriggerSlackMention) {
		return nil
	}
	var p struct {
		Channel  string `json:"channel"`
		ThreadTS string `json:"thread_ts"`
	}
	if err := json.Unmarshal(run.Trigger, &p); err != nil || p.Channel == "" || p.ThreadTS == "" {
		return fmt.Errorf("run %s: its trigger names no Slack thread", run.ID)
	}
	_, _, err := a.st.PutThread(ctx, domain.ChatThread{Kind: domain.IntegrationSlack, Channel: p.Channel, Thread: p.ThreadTS, TaskID: task,
		RunID: run.ID, CreatedAt: a.now()})
	return err
}
