package signin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
)

// Config is the identity provider and the lifetimes of what sign-in
// makes. An empty Issuer means no provider: the dashboard signs in with a
// login link or a pasted key, and the CLI with a pasted key.
type Config struct {
	Issuer       string // the provider's issuer URL (discovery at /.well-known/openid-configuration)
	ClientID     string // the dashboard's client
	ClientSecret string // "" for a public client (PKCE alone)
	CLIClientID  string // the CLI's public client for the device flow; default ClientID
	Scopes       []string
	// BaseURL is where browsers reach engrams; the redirect URI is
	// BaseURL + /v1/auth/oidc/callback. An https BaseURL makes cookies
	// Secure.
	BaseURL     string
	IdleTimeout time.Duration // a sign-in unused this long ends; default 12h
	MaxAge      time.Duration // a sign-in ends this long after it began; default 7 days
	FlowTTL     time.Duration // how long a started sign-in may take at the provider; default 10m
	CLIKeyTTL   time.Duration // a CLI sign-in's key expires after this; default 90 days
	HTTPClient  *http.Client  // to reach the provider; default http.DefaultClient
}

func (c Config) withDefaults() Config {
	if c.CLIClientID == "" {
		c.CLIClientID = c.ClientID
	}
	if len(c.Scopes) == 0 {
		c.Scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 12 * time.Hour
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 7 * 24 * time.Hour
	}
	if c.FlowTTL <= 0 {
		c.FlowTTL = 10 * time.Minute
	}
	if c.CLIKeyTTL <= 0 {
		c.CLIKeyTTL = 90 * 24 * time.Hour
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	return c
}

// Store is what sign-in reads and writes of the store.
type Store interface {
	CreateToken(ctx context.Context, t domain.Token) error
	TokenByHash(ctx context.Context, hash string) (domain.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	GetUser(ctx context.Context, id domain.UserID) (domain.User, error)
	Memberships(ctx context.Context, user domain.UserID) ([]domain.Member, error)
	SetMemberGroups(ctx context.Context, org domain.OrgID, user domain.UserID, groups []string) error
	AppendAudit(ctx context.Context, e domain.AuditEvent) error
}

// Deps are sign-in's collaborators.
type Deps struct {
	Store  Store
	Logger *slog.Logger
	Now    func() time.Time
	NewID  func() string
}

// Service serves the sign-in routes and begins browser sign-ins.
type Service struct {
	cfg  Config
	deps Deps

	mu       sync.Mutex
	provider *oidc.Provider // discovered on first use
	used     usedTokens     // ID tokens already traded for a key
}

// New builds the service; it reaches the provider only when first asked.
func New(cfg Config, deps Deps) (*Service, error) {
	cfg = cfg.withDefaults()
	if deps.Store == nil || deps.NewID == nil {
		return nil, errors.New("signin: Deps.Store and Deps.NewID are required")
	}
	if cfg.Issuer != "" && (cfg.ClientID == "" || cfg.BaseURL == "") {
		return nil, errors.New("signin: an OIDC issuer needs a client id and the base URL browsers use")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Service{cfg: cfg, deps: deps}, nil
}

// Route mounts the sign-in routes (every one public: what they carry is
// the credential).
func (s *Service) Route(h func(pattern string, fn http.HandlerFunc)) {
	h(apiv1.RouteAuthConfig, s.authConfig)
	h(apiv1.RouteOIDCStart, s.start)
	h(apiv1.RouteOIDCCallback, s.callback)
	h(apiv1.RouteCLISignIn, s.cliSignIn)
	h(apiv1.RouteSignOut, s.signOut)
}

// discover returns the provider, reading its discovery document once.
func (s *Service) discover(ctx context.Context) (*oidc.Provider, error) {
	if s.cfg.Issuer == "" {
		return nil, errNoProvider
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider != nil {
		return s.provider, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, s.cfg.HTTPClient), s.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the identity provider %s: %w", s.cfg.Issuer, err)
	}
	s.provider = p
	return p, nil
}

var errNoProvider = errors.New("no identity provider is configured here: sign in with a login link (`engrams dev` prints one) or an API key")

func (s *Service) authConfig(w http.ResponseWriter, r *http.Request) {
	out := apiv1.AuthConfig{}
	if s.cfg.Issuer != "" {
		p, err := s.discover(r.Context())
		if err != nil {
			s.deps.Logger.Warn("sign-in: discover the identity provider", "err", err)
			writeError(w, http.StatusBadGateway, apiv1.CodeUnavailable, "the identity provider cannot be reached")
			return
		}
		ep := p.Endpoint()
		out = apiv1.AuthConfig{OIDC: true, Issuer: s.cfg.Issuer, CLIClientID: s.cfg.CLIClientID,
			DeviceAuthURL: ep.DeviceAuthURL, TokenURL: ep.TokenURL, Scopes: s.cfg.Scopes}
	}
	writeJSON(w, http.StatusOK, out)
}

// oauth is the dashboard's client at p.
func (s *Service) oauth(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: s.cfg.BaseURL + "/v1/auth/oidc/callback", Scopes: s.cfg.Scopes}
}

// Begin signs the browser of w in as user in org: a new sign-in token,
// its secret in the HttpOnly cookie and its anti-forgery token in the
// readable one. how names the way in for the audit log.
func (s *Service) Begin(ctx context.Context, w http.ResponseWriter, r *http.Request, m domain.Member, how string) (apiv1.SignedIn, error) {
	secret, prefix := access.NewSecret()
	now := s.deps.Now()
	t := domain.Token{ID: s.deps.NewID(), Name: "signin-" + how, Kind: domain.TokenSession, OrgID: m.OrgID, UserID: m.User.ID,
		Role:   domain.RoleOwner, // bounded by the membership at every request, so it follows a role change both ways
		Prefix: prefix, Hash: access.HashSecret(secret), CreatedAt: now, ExpiresAt: now.Add(s.cfg.MaxAge), IdleTimeout: s.cfg.IdleTimeout}
	if err := s.deps.Store.CreateToken(ctx, t); err != nil {
		return apiv1.SignedIn{}, fmt.Errorf("begin a sign-in: %w", err)
	}
	s.setCookies(w, secret, int(s.cfg.MaxAge/time.Second))
	s.audit(ctx, r, m.OrgID, m.User, t.ID, "signin."+how)
	return apiv1.SignedIn{UserID: string(m.User.ID), Name: display(m.User), OrgID: string(m.OrgID), Role: string(m.Role)}, nil
}

// setCookies sets (maxAge > 0) or clears (maxAge < 0) the two cookies.
func (s *Service) setCookies(w http.ResponseWriter, secret string, maxAge int) {
	secure := strings.HasPrefix(s.cfg.BaseURL, "https://")
	csrf := ""
	if secret != "" {
		csrf = access.CSRFToken(secret)
	}
	http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Value: secret, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: apiv1.CSRFCookie, Value: csrf, Path: "/", MaxAge: maxAge,
		Secure: secure, SameSite: http.SameSiteStrictMode})
}

// signOut revokes this browser's sign-in and clears its cookies. A
// cookie-authenticated write, so it needs the anti-forgery header.
func (s *Service) signOut(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(apiv1.SessionCookie)
	if err == nil && c.Value != "" {
		if !access.CSRFMatches(c.Value, r.Header.Get(apiv1.HeaderCSRF)) {
			writeError(w, http.StatusForbidden, apiv1.CodeForbidden, "sign-out needs the "+apiv1.HeaderCSRF+" header from the "+apiv1.CSRFCookie+" cookie")
			return
		}
		t, err := s.deps.Store.TokenByHash(r.Context(), access.HashSecret(c.Value))
		switch {
		case err == nil && t.Kind == domain.TokenSession:
			if err := s.deps.Store.RevokeToken(r.Context(), t.ID, s.deps.Now()); err != nil {
				s.deps.Logger.Error("sign-out: revoke the sign-in", "token_id", t.ID, "err", err)
				writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not end the sign-in")
				return
			}
			if u, err := s.deps.Store.GetUser(r.Context(), t.UserID); err == nil {
				s.audit(r.Context(), r, t.OrgID, u, t.ID, "signout")
			}
		case err != nil && !errors.Is(err, domain.ErrNotFound):
			s.deps.Logger.Error("sign-out: look up the sign-in", "err", err)
		}
	}
	s.setCookies(w, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) audit(ctx context.Context, r *http.Request, org domain.OrgID, u domain.User, keyID, action string) {
	e := domain.AuditEvent{ID: s.deps.NewID(), OrgID: org, ActorKind: "user", ActorID: string(u.ID), ActorName: display(u),
		KeyID: keyID, Action: action, TargetKind: "user", TargetID: string(u.ID), Status: http.StatusOK, Remote: remoteHost(r), At: s.deps.Now()}
	if err := s.deps.Store.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		s.deps.Logger.Error("record an audit event", "action", action, "err", err)
	}
}

func display(u domain.User) string {
	if u.Email != "" {
		return u.Email
	}
	if u.Name != "" {
		return u.Name
	}
	return string(u.ID)
}

func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
