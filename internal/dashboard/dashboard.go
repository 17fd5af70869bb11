package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// static is the built app (web/: `npm run build`), committed so a fresh
// clone's `go build` serves it.
//
//go:embed static.gen
var static embed.FS

// Config tunes the dashboard.
type Config struct {
	LoginTTL  time.Duration // how long a login code works; default 15m
	MaxCodes  int           // login codes outstanding at once (the oldest go); default 16
	LoginBody int64         // login request bodies; default 4 KiB
}

func (c Config) withDefaults() Config {
	if c.LoginTTL <= 0 {
		c.LoginTTL = 15 * time.Minute
	}
	if c.MaxCodes <= 0 {
		c.MaxCodes = 16
	}
	if c.LoginBody <= 0 {
		c.LoginBody = 4 << 10
	}
	return c
}

// Deps are the dashboard's collaborators.
type Deps struct {
	// SignIn signs the browser of w in as the deployment's first owner
	// (the person `engrams dev` made): it sets the sign-in cookies.
	SignIn func(w http.ResponseWriter, r *http.Request) (apiv1.SignedIn, error)
	Now    func() time.Time
	Logger *slog.Logger
}

// Dashboard serves the app and exchanges login codes for sign-ins.
type Dashboard struct {
	cfg   Config
	deps  Deps
	files fs.FS
	index []byte
	mu    sync.Mutex
	codes []code // oldest first
}

type code struct {
	value   string
	expires time.Time
}

// New builds the dashboard over the embedded app.
func New(cfg Config, deps Deps) (*Dashboard, error) {
	sub, err := fs.Sub(static, "static.gen")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return newWith(cfg, deps, sub)
}

func newWith(cfg Config, deps Deps, files fs.FS) (*Dashboard, error) {
	if deps.SignIn == nil {
		return nil, errors.New("dashboard: Deps.SignIn is required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: the built app has no index.html (run `npm run build` in web/): %w", err)
	}
	return &Dashboard{cfg: cfg.withDefaults(), deps: deps, files: files, index: index}, nil
}

// Route serves the app at / (every path the API and the host link do not
// claim) and the login exchange at apiv1.RouteDashboardLogin.
func (d *Dashboard) Route(mux *http.ServeMux) {
	mux.HandleFunc(apiv1.RouteDashboardLogin, d.login)
	mux.Handle("/", d.app()) // no method: "GET /" would conflict with the API's "/v1/"
}

// LoginURL mints a login code and returns the link that signs a browser
// in with it: base + /login#code=… (a fragment, so the code stays out of
// request logs and Referer headers). It works once, for Config.LoginTTL.
func (d *Dashboard) LoginURL(base string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	c := base64.RawURLEncoding.EncodeToString(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.codes = append(d.codes, code{value: c, expires: d.deps.Now().Add(d.cfg.LoginTTL)})
	if over := len(d.codes) - d.cfg.MaxCodes; over > 0 {
		d.codes = d.codes[over:]
	}
	return base + "/login#code=" + c
}

// redeem uses up c if it is outstanding and unexpired.
func (d *Dashboard) redeem(c string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.deps.Now()
	for i, k := range d.codes {
		if subtle.ConstantTimeCompare([]byte(k.value), []byte(c)) == 1 {
			d.codes = append(d.codes[:i], d.codes[i+1:]...)
			return now.Before(k.expires)
		}
	}
	return false
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	var req apiv1.DashboardLoginRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, d.cfg.LoginBody+1))
	if err != nil || int64(len(body)) > d.cfg.LoginBody || json.Unmarshal(body, &req) != nil || req.Code == "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "a login request is {\"code\": \"…\"}, at most 4 KiB")
		return
	}
	if !d.redeem(req.Code) {
		writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized,
			"this login link is unknown, used or expired: ask `engrams dev` for a new one (it prints one at start), or sign in with an API key")
		return
	}
	in, err := d.deps.SignIn(w, r)
	if err != nil {
		d.deps.Logger.Error("dashboard login: sign in", "err", err)
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not sign in")
		return
	}
	d.deps.Logger.Info("dashboard login", "user_id", in.UserID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, in)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiv1.Error{Error: msg, Code: code})
}
