package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
)

// Config tunes the gateway.
type Config struct {
	// HeaderTimeout bounds how long the gateway waits for an upstream
	// answer's headers (a stream then runs as long as it flows); default 10m.
	HeaderTimeout time.Duration
}

// Secrets opens the secret a session is granted (secrets.Vault does).
type Secrets interface {
	Open(ctx context.Context, id string) (domain.Secret, []byte, error)
}

// Deps are what the gateway needs.
type Deps struct {
	Store   store.Store
	Secrets Secrets
	// Sealer seals the gateway's own key; nil: the gateway refuses, saying
	// the server keeps no secrets.
	Sealer secrets.Sealer
	// Upstream carries requests to model providers; nil: a clone of
	// http.DefaultTransport (TLS verified with the system roots). Tests
	// give one trusting their server's certificate.
	Upstream http.RoundTripper
	Logger   *slog.Logger
	Now      func() time.Time // default time.Now
	NewID    func() string    // default UUIDv7
}

// Gateway is the model gateway: it gives sessions placeholders for their
// model keys and forwards their harnesses' requests with the real keys.
type Gateway struct {
	cfg     Config
	st      store.Store
	vault   Secrets
	secrets secrets.Sealer
	gateway gatewayState
	log     *slog.Logger
	now     func() time.Time
	newID   func() string
}

// New returns the gateway.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if deps.Store == nil || deps.Secrets == nil {
		return nil, errors.New("new model gateway: Store and Secrets are required")
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = defaultGatewayHeaderTimeout
	}
	g := &Gateway{cfg: cfg, st: deps.Store, vault: deps.Secrets, secrets: deps.Sealer,
		gateway: gatewayState{upstream: deps.Upstream}, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.newID == nil {
		g.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return g, nil
}
