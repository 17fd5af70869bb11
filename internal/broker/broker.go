package broker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/secrets"
)

// Config bounds the broker; zero fields take the defaults.
type Config struct {
	HandshakeTimeout time.Duration // the guest's TLS handshake (10 s)
	IdleTimeout      time.Duration // a terminated connection with no request (2 min)
	HeaderTimeout    time.Duration // an upstream's answer headers (2 min)
	MaxConns         int           // terminated connections at once, all sessions (256)
	// MaxDecodedBytes bounds an upstream answer that came gzip- or
	// deflate-encoded, decoded to be scrubbed (256 MiB).
	MaxDecodedBytes int64
}

func (c Config) withDefaults() Config {
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 2 * time.Minute
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 256
	}
	if c.MaxDecodedBytes <= 0 {
		c.MaxDecodedBytes = 256 << 20
	}
	return c
}

// Secrets opens a granted secret (secrets.Vault does).
type Secrets interface {
	Open(ctx context.Context, id domain.SecretID) (domain.Secret, []byte, error)
}

// AppTokens mints GitHub App installation tokens (ghapp.Minter does).
type AppTokens interface {
	Token(ctx context.Context, app ghapp.App, repos []string, perms map[string]string) (ghapp.Token, error)
}

// Events records what the broker decided on a session's requests
// (egresslog.Log does).
type Events interface {
	Record(ctx context.Context, sid domain.SessionID, epoch int64, events []hostlink.EgressEvent) error
}

// Dialer makes the broker's upstream connections (a *netpolicy.Guard:
// it resolves the name itself and refuses loopback and private addresses
// unless the operator allowed them).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Store is what the broker reads of the store: a session's grants, and
// its CA (engrams's own sealed value).
type Store interface {
	secrets.InternalStore
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
}

// Deps are what the broker needs.
type Deps struct {
	Store   Store
	Secrets Secrets
	Sealer  secrets.Sealer // seals the CA; nil: brokering is refused
	// AppTokens mints tokens for github_app credentials; nil: they are
	// refused.
	AppTokens AppTokens
	Events    Events // nil: decisions are only logged
	Upstream  Dialer // nil: a netpolicy.Guard allowing no private address
	// RootCAs verify upstream certificates; nil: the system roots.
	RootCAs *x509.CertPool
	Logger  *slog.Logger
	Now     func() time.Time
	NewID   func() string
}

// Broker is the credential broker.
type Broker struct {
	cfg      Config
	st       Store
	vault    Secrets
	sealer   secrets.Sealer
	apps     AppTokens
	events   Events
	upstream http.RoundTripper
	ca       caState
	slots    chan struct{}
	log      *slog.Logger
	now      func() time.Time
	newID    func() string
}

// New returns the broker.
func New(cfg Config, deps Deps) (*Broker, error) {
	if deps.Store == nil || deps.Secrets == nil {
		return nil, errors.New("new credential broker: Store and Secrets are required")
	}
	cfg = cfg.withDefaults()
	if deps.Upstream == nil {
		deps.Upstream = netpolicy.NewGuard(netpolicy.GuardConfig{})
	}
	t := &http.Transport{
		DialContext:           deps.Upstream.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: deps.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   cfg.HandshakeTimeout,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       time.Minute,
	}
	b := &Broker{cfg: cfg, st: deps.Store, vault: deps.Secrets, sealer: deps.Sealer, apps: deps.AppTokens, events: deps.Events,
		upstream: t, slots: make(chan struct{}, cfg.MaxConns), log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.newID == nil {
		b.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return b, nil
}

// CACert is the deployment CA's certificate, PEM: what a guest of a
// session with a brokered credential trusts.
func (b *Broker) CACert(ctx context.Context) ([]byte, error) {
	a, err := b.authority(ctx)
	if err != nil {
		return nil, err
	}
	return a.certPEM, nil
}

// Placeholder is what session sid's guest sends in place of the
// credential for hostPort: domain.PlaceholderPrefix + base64url(HMAC(the
// CA's placeholder key, sid + "\x00broker\x00" + hostPort)). Only the
// broker, on that session's TLS to that host, puts the secret in for it.
func (b *Broker) Placeholder(ctx context.Context, sid domain.SessionID, hostPort string) (string, error) {
	if sid == "" || hostPort == "" {
		return "", fmt.Errorf("%w: a broker placeholder needs a session id and a host", domain.ErrInvalid)
	}
	a, err := b.authority(ctx)
	if err != nil {
		return "", err
	}
	return placeholder(a.phKey, sid, hostPort), nil
}

func placeholder(key []byte, sid domain.SessionID, hostPort string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sid))
	m.Write([]byte("\x00broker\x00"))
	m.Write([]byte(hostPort))
	return domain.PlaceholderPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// RouteHostLink adds the broker to the host-link mux (hostlink.PathBroker).
func (b *Broker) RouteHostLink(mux *http.ServeMux) {
	mux.HandleFunc("GET "+hostlink.PathBroker, b.handleBroker)
}
