package githubapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
)

// GitHub signs each webhook delivery: X-Hub-Signature-256 is "sha256="
// and the hex HMAC-SHA256 of the body keyed by the webhook's secret;
// X-GitHub-Event names the event, X-GitHub-Delivery the delivery (a hint:
// the signature does not cover it).
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
	// DefaultAPIURL is GitHub's REST API.
	DefaultAPIURL = "https://api.github.com"
)

// Sign is the X-Hub-Signature-256 of body.
func Sign(secret string, body []byte) string { return connector.HMAC([]byte(secret), "sha256=", body) }

// Deps are the collaborators of an App.
type Deps struct {
	Settings connector.Settings
	// People tells which engrams member a GitHub account is (the store);
	// nil: nobody is, so @engrams comments start nothing.
	People connector.People
	// Branches pushes tasks' changes as branches (tasks.Pusher); nil:
	// open_pr and task pr are refused.
	Branches Branches
	// HTTP calls GitHub: the deployment's address policy.
	HTTP   *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// App is the GitHub integration.
type App struct {
	ins      connector.Settings
	http     *http.Client
	log      *slog.Logger
	now      func() time.Time
	branches Branches
	people   connector.People
	minter   *ghapp.Minter // installation tokens, when GitHub is an App
}

// The seam's parts GitHub implements.
var (
	_ connector.Receiver = (*App)(nil)
	_ connector.Blocks   = (*App)(nil)
)

// New returns an App.
func New(deps Deps) (*App, error) {
	if deps.Settings == nil || deps.HTTP == nil {
		return nil, errors.New("githubapp: Settings and HTTP are required")
	}
	a := &App{ins: deps.Settings, branches: deps.Branches, people: deps.People, http: deps.HTTP, log: deps.Logger, now: deps.Now}
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
	var c conf
	secrets, err := connector.Open(ctx, a.ins, domain.IntegrationGitHub, &c)
	if err != nil {
		return conf{}, err
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

// The block kinds GitHub executes.
const (
	BlockComment = "github_comment"
	BlockReview  = "github_review"
	BlockOpenPR  = "open_pr"
	BlockFile    = "github_file"
)

// BlockKinds implements connector.Blocks.
func (a *App) BlockKinds() []string {
	return []string{BlockComment, BlockReview, BlockOpenPR, BlockFile}
}

// Escape implements connector.Blocks: values placed in a comment's,
// review's or pull request's text mention nobody.
func (a *App) Escape(field, value string) string {
	if field == "text" || field == "title" {
		return connector.EscapeMarkdown(value)
	}
	return value
}

// Execute implements connector.Blocks.
func (a *App) Execute(ctx context.Context, call connector.Call) (string, error) {
	f := call.Fields
	switch call.Kind {
	case BlockComment:
		return a.Comment(ctx, f["repo"], f["number"], f["text"], call.Key)
	case BlockReview:
		return a.Review(ctx, f["repo"], f["number"], f["text"], call.Key)
	case BlockOpenPR:
		pr, err := a.OpenTaskPR(ctx, call.Task, f["repo"], f["title"], "")
		if errors.Is(err, domain.ErrNothingChanged) {
			return "", nil // no changes, no pull request: the output is empty
		}
		return pr.URL, err
	case BlockFile:
		return a.File(ctx, f["repo"], f["ref"], f["path"])
	}
	return "", fmt.Errorf("github executes no %s block", call.Kind)
}
