package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
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

// Store keeps threads, and reads tasks' conversations.
type Store interface {
	PutThread(ctx context.Context, t domain.ChatThread) (domain.ChatThread, bool, error)
	GetThread(ctx context.Context, kind domain.IntegrationKind, channel, thread string) (domain.ChatThread, error)
	ClaimThreads(ctx context.Context, owner string, now, until time.Time, limit int) ([]domain.ChatThread, error)
	UpdateThread(ctx context.Context, t domain.ChatThread, owner string) error
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error)
}

// Tasks takes thread replies (tasks.Tasks).
type Tasks interface {
	SendTask(ctx context.Context, id domain.TaskID, text string) (domain.TaskEvent, error)
}

// Deps are the collaborators of an App.
type Deps struct {
	Store    Store
	People   People // who a Slack user is (the store)
	Settings connector.Settings
	Tasks    Tasks
	// HTTP calls Slack: the deployment's address policy (a client whose
	// dialer refuses loopback and private addresses unless allowed).
	HTTP   *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// App is the Slack integration of one replica.
type App struct {
	cfg    Config
	st     Store
	people People
	ins    connector.Settings
	tasks  Tasks
	http   *http.Client
	log    *slog.Logger
	now    func() time.Time
}

// The seam's parts Slack implements.
var (
	_ connector.Receiver     = (*App)(nil)
	_ connector.Blocks       = (*App)(nil)
	_ connector.TaskFollower = (*App)(nil)
	_ connector.ProfileGate  = (*App)(nil)
)

// New returns an App.
func New(cfg Config, deps Deps) (*App, error) {
	if cfg.Owner == "" || deps.Store == nil || deps.People == nil || deps.Settings == nil || deps.Tasks == nil || deps.HTTP == nil {
		return nil, errors.New("slackapp: Owner, Store, People, Settings, Tasks and HTTP are required")
	}
	if cfg.RelayEvery <= 0 {
		cfg.RelayEvery = time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	a := &App{cfg: cfg, st: deps.Store, people: deps.People, ins: deps.Settings, tasks: deps.Tasks, http: deps.HTTP, log: deps.Logger, now: deps.Now}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// settings are Slack's, as configured (integration add slack).
type settings struct {
	APIURL string `json:"api_url"`
	// Channels grants each channel the profiles its mentions may use, the
	// first its default ("C1": "web" or "C1": ["web", "docs"]); a channel
	// not listed may use DefaultProfile only.
	Channels       channelGrants `json:"channels"`
	DefaultProfile string        `json:"default_profile"`
	DashboardURL   string        `json:"dashboard_url"`
	SocketMode     bool          `json:"socket_mode"`
	// ThreadUsers may continue any thread's task; anyone else only the
	// threads they started.
	ThreadUsers []string `json:"thread_users"`
	// AllowExternal lets users of other workspaces (Slack Connect) start
	// and continue tasks; refused by default.
	AllowExternal bool `json:"allow_external"`
}

// channelGrants are the profiles each channel may use.
type channelGrants map[string][]string

// UnmarshalJSON takes a profile or a list of profiles per channel.
func (g *channelGrants) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*g = channelGrants{}
	for ch, v := range raw {
		var one string
		if json.Unmarshal(v, &one) == nil {
			(*g)[ch] = []string{one}
			continue
		}
		var list []string
		if err := json.Unmarshal(v, &list); err != nil {
			return fmt.Errorf("channel %s: want a profile or a list of profiles", connector.Clip(ch, 40))
		}
		(*g)[ch] = list
	}
	return nil
}

// profiles are what channel's mentions may use, the default first.
func (s settings) profiles(channel string) []string {
	if p, ok := s.Channels[channel]; ok {
		return p
	}
	if s.DefaultProfile != "" {
		return []string{s.DefaultProfile}
	}
	return nil
}

// conf is Slack's settings and credentials, opened now.
type conf struct {
	settings
	bot, signing, app string
}

func (a *App) conf(ctx context.Context) (conf, error) {
	var c conf
	secrets, err := connector.Open(ctx, a.ins, domain.IntegrationSlack, &c.settings)
	if err != nil {
		return conf{}, err
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

// Run relays threads until ctx ends.
func (a *App) Run(ctx context.Context) error {
	a.relayLoop(ctx)
	return nil
}

// BlockPostSlack is the block kind Slack executes.
const BlockPostSlack = "post_slack"

// BlockKinds implements connector.Blocks.
func (a *App) BlockKinds() []string { return []string{BlockPostSlack} }

// Escape implements connector.Blocks: values placed in a post's text are
// plain text in Slack (no mention, no disguised link).
func (a *App) Escape(field, value string) string {
	if field == "text" {
		return connector.EscapeSlack(value)
	}
	return value
}

// Execute implements connector.Blocks: post_slack posts its text to its
// channel (the mention's, in its thread, when it is the run's) once per
// key: a post made before a crash is found by its key instead.
func (a *App) Execute(ctx context.Context, call connector.Call) (string, error) {
	if call.Kind != BlockPostSlack {
		return "", fmt.Errorf("slack executes no %s block", call.Kind)
	}
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	var m Mention
	_ = json.Unmarshal(call.Run.Payload, &m)
	channel, thread := call.Fields["channel"], ""
	if channel == "" || channel == m.Channel {
		channel, thread = m.Channel, m.ThreadTS
	}
	if channel == "" {
		return "", errors.New("post_slack names no channel, and its run was not started from Slack")
	}
	ts, _, err := a.web(c).postOnce(ctx, channel, thread, call.Fields["text"], call.Key)
	return ts, err
}

// AllowProfile implements connector.ProfileGate: a task of a run started
// by a mention uses a profile its channel may use, whatever profile the
// automation names.
func (a *App) AllowProfile(ctx context.Context, run connector.Run, profile string) error {
	if run.Trigger != TriggerMention {
		return nil
	}
	var m Mention
	if err := json.Unmarshal(run.Payload, &m); err != nil || m.Channel == "" {
		return fmt.Errorf("run %s: its trigger names no Slack channel", run.ID)
	}
	c, err := a.conf(ctx)
	if err != nil {
		return err
	}
	if allowed := c.profiles(m.Channel); !slices.Contains(allowed, profile) {
		return fmt.Errorf("%w: Slack channel %s may not use profile %s (it may use: %s)", domain.ErrInvalid, m.Channel, connector.Clip(profile, 64),
			listOr(allowed))
	}
	return nil
}

// TaskStarted implements connector.TaskFollower: a task started by a run
// of a mention is carried by its thread from now on, continued by the
// user who mentioned.
func (a *App) TaskStarted(ctx context.Context, run connector.Run, task domain.TaskID) error {
	if run.Trigger != TriggerMention {
		return nil
	}
	var m Mention
	if err := json.Unmarshal(run.Payload, &m); err != nil || m.Channel == "" || m.ThreadTS == "" {
		return fmt.Errorf("run %s: its trigger names no Slack thread", run.ID)
	}
	_, _, err := a.st.PutThread(ctx, domain.ChatThread{Kind: domain.IntegrationSlack, Channel: m.Channel, Thread: m.ThreadTS, TaskID: task,
		RunID: run.ID, StartedBy: m.User, CreatedAt: a.now()})
	return err
}
