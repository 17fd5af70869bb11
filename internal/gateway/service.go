package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/secrets"
)

// Config tunes the gateway.
type Config struct {
	// HeaderTimeout bounds how long the gateway waits for an upstream
	// answer's headers (a stream then runs as long as it flows); default 10m.
	HeaderTimeout time.Duration
}

// Secrets opens the secret a session is granted (secrets.Vault does).
type Secrets interface {
	Open(ctx context.Context, id domain.SecretID) (domain.Secret, []byte, error)
}

// Providers is how the gateway reaches model providers (a *netpolicy.Guard
// is): it judges a base URL's host before a request is forwarded, and
// makes every upstream connection, refusing addresses the operator did not
// allow (loopback, private ranges).
type Providers interface {
	CheckHost(host string, port uint16) error
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Store is what the gateway reads of the store: sessions, their tasks and
// hosts, keys, and its own sealed key.
type Store interface {
	secrets.InternalStore
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	GetHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	GetToken(ctx context.Context, id string) (domain.Token, error)
	TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error)
}

// Deps are what the gateway needs.
type Deps struct {
	Store   Store
	Secrets Secrets
	// Sealer seals the gateway's own key; nil: the gateway refuses, saying
	// the server keeps no secrets.
	Sealer secrets.Sealer
	// Providers dials model providers; nil: a netpolicy.Guard allowing no
	// private or loopback address. No proxy is used: it would reach what
	// Providers refuses.
	Providers Providers
	// RootCAs verify providers' TLS certificates; nil: the system roots.
	// Tests give a pool trusting their server's certificate.
	RootCAs *x509.CertPool
	Logger  *slog.Logger
	Now     func() time.Time // default time.Now
	NewID   func() string    // default UUIDv7
}

// Gateway is the model gateway: it gives sessions placeholders for their
// model keys and forwards their harnesses' requests with the real keys.
type Gateway struct {
	cfg       Config
	st        Store
	vault     Secrets
	secrets   secrets.Sealer
	providers Providers
	upstream  http.RoundTripper // dials through providers, bounded by the header timeout
	gateway   gatewayState
	log       *slog.Logger
	now       func() time.Time
	newID     func() string
}

// New returns the gateway.
func New(cfg Config, deps Deps) (*Gateway, error) {
	if deps.Store == nil || deps.Secrets == nil {
		return nil, errors.New("new model gateway: Store and Secrets are required")
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = defaultGatewayHeaderTimeout
	}
	if deps.Providers == nil {
		deps.Providers = netpolicy.NewGuard(netpolicy.GuardConfig{})
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = deps.Providers.DialContext
	t.DisableCompression = true // bodies pass through as the client asked for them
	t.TLSClientConfig = &tls.Config{RootCAs: deps.RootCAs, MinVersion: tls.VersionTLS12}
	g := &Gateway{cfg: cfg, st: deps.Store, vault: deps.Secrets, secrets: deps.Sealer, providers: deps.Providers,
		upstream: headerTimeout{rt: t, d: cfg.HeaderTimeout}, log: deps.Logger, now: deps.Now, newID: deps.NewID}
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
