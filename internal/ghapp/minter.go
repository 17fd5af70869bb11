package ghapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Error categories of Token, by what GitHub answered.
var (
	// ErrAppAuth: GitHub refused the app JWT (401): wrong app ID or key, or
	// this machine's clock is off.
	ErrAppAuth = errors.New("github refused the app's credentials")
	// ErrInstallation: no such installation of the app (404), or it is
	// suspended (403).
	ErrInstallation = errors.New("github app installation not found or not usable")
	// ErrScope: the installation cannot grant what was asked (422): a
	// repository it was not given, or a permission the app lacks.
	ErrScope = errors.New("github app installation cannot grant the token's scope")
	// ErrUpstream: any other answer, or none.
	ErrUpstream = errors.New("github app token request failed")
)

// Bounds of a token request.
const (
	maxRepos        = 500 // GitHub's own limit per token
	maxResponseBody = 1 << 20
	maxCached       = 1024
	defaultRefresh  = 10 * time.Minute
	requestTimeout  = 30 * time.Second
)

// DefaultPermissions is what a token is scoped to unless Config or the
// caller says otherwise: fetch code, read repository metadata.
func DefaultPermissions() map[string]string {
	return map[string]string{"contents": "read", "metadata": "read"}
}

// maxPermissions bounds the permissions one token asks for.
const maxPermissions = 32

// Token is an installation access token and what GitHub says it grants.
type Token struct {
	Token        string
	ExpiresAt    time.Time
	Permissions  map[string]string
	Repositories []string // names, as GitHub returned them
}

// Config tunes a Minter.
type Config struct {
	// RefreshBefore: a cached token is used until this long before it
	// expires (default 10 minutes, a clone's timeout), so a token handed
	// out is good for at least that long.
	RefreshBefore time.Duration
	// Permissions asked for a token whose caller names none; default
	// DefaultPermissions.
	Permissions map[string]string
}

// Deps are what a Minter needs.
type Deps struct {
	// HTTP sends the token requests (default http.DefaultTransport); one
	// without a timeout gets 30 s. Redirects are never followed (the JWT
	// must not go elsewhere).
	HTTP   *http.Client
	Now    func() time.Time // default time.Now
	Logger *slog.Logger
}

// Minter mints installation tokens and caches each until shortly before
// it expires. It is safe for concurrent use (callers asking for one scope
// at once may each mint one).
type Minter struct {
	cfg  Config
	http *http.Client
	now  func() time.Time
	log  *slog.Logger

	mu    sync.Mutex
	cache map[string]Token
}

// New returns a Minter.
func New(cfg Config, deps Deps) *Minter {
	if cfg.RefreshBefore <= 0 {
		cfg.RefreshBefore = defaultRefresh
	}
	if len(cfg.Permissions) == 0 {
		cfg.Permissions = DefaultPermissions()
	}
	m := &Minter{cfg: cfg, now: deps.Now, log: deps.Logger, cache: map[string]Token{}}
	if m.now == nil {
		m.now = time.Now
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	var client http.Client
	if deps.HTTP != nil {
		client = *deps.HTTP
	}
	if client.Timeout <= 0 {
		client.Timeout = requestTimeout
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	m.http = &client
	return m
}

// Token returns an installation token of app scoped to repos (repository
// names within the installation's account) and perms (GitHub's permission
// names to "read" or "write"; none: the configured permissions): a cached
// one of that scope while it has more than RefreshBefore left, else a new
// one.
func (m *Minter) Token(ctx context.Context, app App, repos []string, perms map[string]string) (Token, error) {
	repos, err := checkRepos(repos)
	if err != nil {
		return Token{}, err
	}
	if len(perms) == 0 {
		perms = m.cfg.Permissions
	}
	if err := checkPermissions(perms); err != nil {
		return Token{}, err
	}
	if app.Key == nil {
		return Token{}, errors.New("github app token: the app has no private key")
	}
	key := cacheKey(app, repos, perms)
	m.mu.Lock()
	t, ok := m.cache[key]
	m.mu.Unlock()
	if ok && m.fresh(t) {
		return t, nil
	}
	t, err = m.mint(ctx, app, repos, perms)
	if err != nil {
		return Token{}, err
	}
	if m.fresh(t) {
		m.mu.Lock()
		m.store(key, t)
		m.mu.Unlock()
	}
	return t, nil
}

// fresh reports whether t has more than RefreshBefore left.
func (m *Minter) fresh(t Token) bool { return t.ExpiresAt.Sub(m.now()) > m.cfg.RefreshBefore }

// store caches t, first dropping tokens past their use; at most maxCached.
func (m *Minter) store(key string, t Token) {
	if len(m.cache) >= maxCached {
		for k, c := range m.cache {
			if !m.fresh(c) {
				delete(m.cache, k)
			}
		}
	}
	if len(m.cache) < maxCached {
		m.cache[key] = t
	}
}

// cacheKey names a token's scope: the app, its repositories and its
// permissions.
func cacheKey(app App, repos []string, perms map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%d\x00%s\x00%s\x00", app.baseURL(), app.ID, app.InstallationID, app.fingerprint(), strings.Join(repos, ","))
	for _, p := range slices.Sorted(maps.Keys(perms)) {
		fmt.Fprintf(&b, "%s=%s,", p, perms[p])
	}
	return b.String()
}

// checkPermissions accepts GitHub permission names (lower case and _)
// each to "read" or "write".
func checkPermissions(perms map[string]string) error {
	if len(perms) > maxPermissions {
		return fmt.Errorf("github app token: %d permissions, at most %d", len(perms), maxPermissions)
	}
	for name, level := range perms {
		if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(c rune) bool { return (c < 'a' || c > 'z') && c != '_' }) ||
			(level != "read" && level != "write") {
			return fmt.Errorf("github app token: permission %q: %q: want a permission name to read or write", name, level)
		}
	}
	return nil
}

func (a App) baseURL() string {
	if a.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(a.BaseURL, "/")
}

// checkRepos returns repos sorted without duplicates, each a repository
// name (not owner/name).
func checkRepos(repos []string) ([]string, error) {
	if len(repos) == 0 {
		return nil, errors.New("github app token: no repositories to scope it to")
	}
	if len(repos) > maxRepos {
		return nil, fmt.Errorf("github app token: %d repositories, at most %d", len(repos), maxRepos)
	}
	for _, r := range repos {
		if r == "" || len(r) > 100 || strings.ContainsFunc(r, func(c rune) bool { return c == '/' || unicode.IsSpace(c) || unicode.IsControl(c) }) {
			return nil, fmt.Errorf("github app token: repository %q: want a repository name such as app (not owner/app)", r)
		}
	}
	out := slices.Clone(repos)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// mint asks GitHub for a new token.
func (m *Minter) mint(ctx context.Context, app App, repos []string, perms map[string]string) (Token, error) {
	action := fmt.Sprintf("mint a token of github app %s installation %d", app.ID, app.InstallationID)
	jwt, err := app.JWT(m.now())
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", action, err)
	}
	body, err := json.Marshal(map[string]any{"repositories": repos, "permissions": perms})
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", action, err)
	}
	u := app.baseURL() + "/app/installations/" + strconv.FormatInt(app.InstallationID, 10) + "/access_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", action, err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.http.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w: %v", action, ErrUpstream, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w: read the answer: %v", action, ErrUpstream, err)
	}
	if len(raw) > maxResponseBody {
		return Token{}, fmt.Errorf("%s: %w: the answer is over %d bytes", action, ErrUpstream, maxResponseBody)
	}
	if resp.StatusCode != http.StatusCreated {
		return Token{}, fmt.Errorf("%s: %w", action, statusError(resp.StatusCode, raw))
	}
	t, err := ParseTokenResponse(raw)
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w: %v", action, ErrUpstream, err)
	}
	if !t.ExpiresAt.After(m.now()) {
		return Token{}, fmt.Errorf("%s: %w: the token expired at %s, before it arrived (is this machine's clock right?)", action, ErrUpstream, t.ExpiresAt.Format(time.RFC3339))
	}
	m.log.Info("github app token minted", "app_id", app.ID, "installation_id", app.InstallationID, "repos", len(repos),
		"permissions", perms, "expires_at", t.ExpiresAt)
	return t, nil
}

// statusError maps a refusal to its category, with GitHub's message.
func statusError(code int, body []byte) error {
	msg := githubMessage(body)
	switch code {
	case http.StatusUnauthorized:
		return fmt.Errorf("%w (HTTP 401%s): check the app id and private key, and this machine's clock", ErrAppAuth, msg)
	case http.StatusNotFound:
		return fmt.Errorf("%w (HTTP 404%s): check the installation id, and that the app is installed on the repositories' account", ErrInstallation, msg)
	case http.StatusForbidden:
		return fmt.Errorf("%w (HTTP 403%s)", ErrInstallation, msg)
	case http.StatusUnprocessableEntity:
		return fmt.Errorf("%w (HTTP 422%s): give the installation access to every repository of the profile, and the app the permissions the token asks for (contents and metadata; pull requests and issues for API use)", ErrScope, msg)
	}
	return fmt.Errorf("%w: HTTP %d%s", ErrUpstream, code, msg)
}

// githubMessage is ": <message>" of a GitHub error body, bounded and
// printable, or "".
func githubMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		return ""
	}
	msg := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, e.Message)
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return ": " + msg
}

// ParseTokenResponse decodes the 201 answer of a token request.
func ParseTokenResponse(raw []byte) (Token, error) {
	var r struct {
		Token        string            `json:"token"`
		ExpiresAt    time.Time         `json:"expires_at"`
		Permissions  map[string]string `json:"permissions"`
		Repositories []struct {
			Name string `json:"name"`
		} `json:"repositories"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return Token{}, fmt.Errorf("decode the token: %w", err)
	}
	switch {
	case r.Token == "" || len(r.Token) > 4096 || strings.ContainsFunc(r.Token, func(c rune) bool { return c <= ' ' || c > '~' }):
		return Token{}, errors.New("the answer holds no usable token")
	case r.ExpiresAt.IsZero():
		return Token{}, errors.New("the answer says not when the token expires")
	case len(r.Repositories) > maxRepos:
		return Token{}, fmt.Errorf("the answer lists %d repositories, at most %d", len(r.Repositories), maxRepos)
	}
	t := Token{Token: r.Token, ExpiresAt: r.ExpiresAt, Permissions: r.Permissions}
	for _, repo := range r.Repositories {
		t.Repositories = append(t.Repositories, repo.Name)
	}
	return t, nil
}
