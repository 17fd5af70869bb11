package githubapp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/engrams/engrams/internal/ghapp"
)

// GitHub signs each webhook delivery: X-Hub-Signature-256 is "sha256="
// and the hex HMAC-SHA256 of the body keyed by the webhook's secret;
// X-GitHub-Event names the event, X-GitHub-Delivery the delivery.
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
	// DefaultAPIURL is GitHub's REST API.
	DefaultAPIURL = "https://api.github.com"
)

// ErrBadSignature is the category of a refused delivery.
var ErrBadSignature = errors.New("github signature refused")

// Sign is the X-Hub-Signature-256 of body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery's signature.
func Verify(secret, signature string, body []byte) error {
	if secret == "" {
		return fmt.Errorf("%w: no webhook secret is configured", ErrBadSignature)
	}
	if len(signature) > 200 || !hmac.Equal([]byte(signature), []byte(Sign(secret, body))) {
		return fmt.Errorf("%w: the signature does not match", ErrBadSignature)
	}
	return nil
}

// Store remembers deliveries (the store).
type Store interface {
	RecordDelivery(ctx context.Context, source, id string, at, forgetBefore time.Time) (bool, error)
}

// Integrations opens GitHub's settings and credentials (integrations.Service).
type Integrations interface {
	Open(ctx context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error)
}

// Runs starts the runs of pull-request triggers (autorun.Runner).
type Runs interface {
	StartTriggered(ctx context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error)
}

// Deps are the collaborators of an App.
type Deps struct {
	Store        Store
	Integrations Integrations
	Runs         Runs // may come later: SetRuns
	HTTP         *http.Client
	Logger       *slog.Logger
	Now          func() time.Time
}

// App is the GitHub integration.
type App struct {
	st       Store
	ins      Integrations
	http     *http.Client
	log      *slog.Logger
	now      func() time.Time
	mu       sync.Mutex
	runs     Runs
	branches Branches
	minter   *ghapp.Minter // installation tokens, when GitHub is an App
}

// New returns an App.
func New(deps Deps) (*App, error) {
	if deps.Store == nil || deps.Integrations == nil {
		return nil, errors.New("githubapp: Store and Integrations are required")
	}
	a := &App{st: deps.Store, ins: deps.Integrations, runs: deps.Runs, http: deps.HTTP, log: deps.Logger, now: deps.Now}
	if a.http == nil {
		a.http = &http.Client{Timeout: 30 * time.Second}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.minter = ghapp.New(ghapp.Config{Permissions: map[string]string{"contents": "write", "metadata": "read", "pull_requests": "write",
		"issues": "write"}}, ghapp.Deps{HTTP: a.http, Now: a.now, Logger: a.log})
	return a, nil
}

// SetRuns gives the App the runner (made after it).
func (a *App) SetRuns(r Runs) {
	a.mu.Lock()
	a.runs = r
	a.mu.Unlock()
}

func (a *App) starter() Runs {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs
}

// conf is GitHub's settings and credentials.
type conf struct {
	APIURL         string   `json:"api_url"`
	Repos          []string `json:"repos"` // repositories deliveries are taken from (none: any)
	DashboardURL   string   `json:"dashboard_url"`
	AppID          string   `json:"app_id"` // GitHub as an App: its id and installation
	InstallationID int64    `json:"installation_id"`
	token          string
	privateKey     string
	webhook        string
}

func (a *App) conf(ctx context.Context) (conf, error) {
	raw, secrets, err := a.ins.Open(ctx, domain.IntegrationGitHub)
	if err != nil {
		return conf{}, err
	}
	var c conf
	if err := json.Unmarshal(raw, &c); err != nil {
		return conf{}, fmt.Errorf("decode github settings: %w", err)
	}
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	c.APIURL = strings.TrimRight(c.APIURL, "/")
	c.token, c.privateKey, c.webhook = secrets["token"], secrets["private_key"], secrets["webhook_secret"]
	return c, nil
}

// forRepo is c with the token to call GitHub about repo: the configured
// token, or, for an App, an installation token scoped to that repository
// (minted, and cached while it has long to live).
func (a *App) forRepo(ctx context.Context, c conf, repo string) (conf, error) {
	if c.token != "" || c.privateKey == "" {
		return c, nil
	}
	app, err := ghapp.NewApp(c.AppID, c.InstallationID, c.APIURL, []byte(c.privateKey))
	if err != nil {
		return c, fmt.Errorf("github app: %w", err)
	}
	name := repo[strings.Index(repo, "/")+1:]
	t, err := a.minter.Token(ctx, app, []string{name}, nil)
	if err != nil {
		return c, err
	}
	c.token = t.Token
	return c, nil
}
