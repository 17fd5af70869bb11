package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/pricing"
	"github.com/engrams/engrams/internal/store"
)

// Sessions is what tasks need of the session control plane (the
// coordinator).
type Sessions interface {
	CreateSession(ctx context.Context, spec domain.SessionSpec, idempotencyKey string) (domain.Session, error)
	DeleteSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	Suspend(ctx context.Context, id domain.SessionID) (domain.Session, domain.Op, error)
	WaitSession(ctx context.Context, id domain.SessionID, done func(domain.Session) bool) (domain.Session, error)
	EnsureActive(ctx context.Context, s domain.Session) (domain.Session, error)
	PutOutbox(ctx context.Context, sid domain.SessionID, id, kind string, payload json.RawMessage) (domain.OutboxItem, error)
	// GuestClient reaches the session's guest daemon, resuming it first.
	GuestClient(ctx context.Context, id domain.SessionID) (*guestapi.Client, error)
}

// Profiles resolves the profile a task starts from (profiles.Profiles does).
type Profiles interface {
	ResolveProfile(ctx context.Context, who domain.Grantee, nameOrID string) (domain.Profile, apiv1.ProfileSpec, apiv1.Receipt, error)
}

// Placeholders gives a session's harness the stand-in of a model key
// (gateway.Gateway does).
type Placeholders interface {
	Placeholder(ctx context.Context, sid domain.SessionID, kind string) (string, error)
}

// Secrets opens a repository's git login (secrets.Vault does).
type Secrets interface {
	Open(ctx context.Context, id domain.SecretID) (domain.Secret, []byte, error)
}

// AppTokens mints GitHub App installation tokens for repository clones
// (ghapp.Minter does).
type AppTokens interface {
	Token(ctx context.Context, app ghapp.App, repos []string, perms map[string]string) (ghapp.Token, error)
}

// Config tunes tasks.
type Config struct {
	// MonitorInterval is how often a replica looks for task setups nobody
	// renewed; default 3s.
	MonitorInterval time.Duration
	// Quotas bound what a task takes from its guests (see Quotas for
	// each default and why).
	Quotas Quotas
	// GitConfig are git settings every clone on the coordinator also
	// runs with (name, value), e.g. http.sslCAInfo for a git host with a
	// private CA.
	GitConfig [][2]string
	// Prices prices the tokens of usage events; nil: pricing.Builtin().
	Prices *pricing.Table
}

// Store is what tasks read and write of the store: tasks and their
// events, the sessions they run in, the secrets their profiles name, and
// the change feed.
type Store interface {
	store.Tasks
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	TouchSession(ctx context.Context, id domain.SessionID, at time.Time) error
	GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error)
	Notify(ctx context.Context, topic string) error
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// Deps are what tasks need.
type Deps struct {
	Store        Store
	Sessions     Sessions
	Profiles     Profiles
	Placeholders Placeholders
	Secrets      Secrets
	AppTokens    AppTokens // nil: repos whose credential is a GitHub App cannot be cloned
	// Brokers readies guests for brokered credentials; nil: no repo's
	// credential is brokered (pushes from the guest carry none).
	Brokers Brokers
	Logger  *slog.Logger
	Metrics Metrics          // nil: none
	Now     func() time.Time // default time.Now
	NewID   func() string    // default UUIDv7
}

// Tasks runs agent work: a task's session, its repositories, prompts into
// its harness, the conversation its guest relays back, follow-ups that
// outlive sessions.
type Tasks struct {
	cfg          Config
	st           Store
	sessions     Sessions
	profiles     Profiles
	placeholders Placeholders
	secrets      Secrets
	appTokens    AppTokens
	brokering    brokering
	log          *slog.Logger
	metrics      Metrics
	now          func() time.Time
	newID        func() string
	quotas       Quotas
	guard        *quotaGuard
	prices       pricing.Table

	// bg is cancelled when Run returns; background task work (setup,
	// suspending a stopped task) runs under it and Run joins it.
	bg       context.Context
	bgCancel context.CancelFunc
	tasksWG  sync.WaitGroup
}

// New returns the task service; Run watches for setups to take over.
func New(cfg Config, deps Deps) (*Tasks, error) {
	if deps.Store == nil || deps.Sessions == nil || deps.Profiles == nil || deps.Placeholders == nil || deps.Secrets == nil {
		return nil, errors.New("new tasks: Store, Sessions, Profiles, Placeholders and Secrets are required")
	}
	if cfg.MonitorInterval <= 0 {
		cfg.MonitorInterval = 3 * time.Second
	}
	c := &Tasks{cfg: cfg, st: deps.Store, sessions: deps.Sessions, profiles: deps.Profiles,
		placeholders: deps.Placeholders, secrets: deps.Secrets, appTokens: deps.AppTokens, log: deps.Logger, metrics: deps.Metrics, now: deps.Now, newID: deps.NewID}
	c.quotas = cfg.Quotas.withDefaults()
	c.prices = pricing.Builtin()
	if cfg.Prices != nil {
		c.prices = *cfg.Prices
	}
	c.guard = newQuotaGuard(c.quotas)
	c.brokering = brokering{st: deps.Store, brokers: deps.Brokers, guest: c}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.newID == nil {
		c.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	return c, nil
}

// Run takes over task setups whose replica stopped renewing them until ctx
// ends, then stops and joins the background work of this replica's tasks.
//
// Like the coordinator judging heartbeats, a replica takes over only after
// it has itself been watching, without a failed pass, for taskSetupStale:
// after a restart or a database outage, setups get a full interval to be
// renewed first.
func (c *Tasks) Run(ctx context.Context) error {
	defer func() {
		c.bgCancel()
		c.tasksWG.Wait()
	}()
	t := time.NewTicker(c.cfg.MonitorInterval)
	defer t.Stop()
	watching := c.now()
	last := watching
	for {
		now := c.now()
		if now.Sub(last) > 3*c.cfg.MonitorInterval {
			watching = now // this replica was stalled: it saw nothing meanwhile
		}
		last = now
		if now.Sub(watching) >= taskSetupStale {
			if err := c.takeOverSetups(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("take over task setups", "err", err)
				watching = c.now()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// runCtx is the context of background task work: cancelled when Run returns.
func (c *Tasks) runCtx() context.Context { return c.bg }

// wake notifies a topic's waiters on every replica; a lost notification
// only costs a poll.
func (c *Tasks) wake(ctx context.Context, topic string) {
	for _, tp := range []string{topic, TopicTasks} {
		if err := c.st.Notify(ctx, tp); err != nil {
			c.log.Warn("notify failed; waiters fall back to polling", "topic", tp, "err", err)
		}
	}
}
