package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/hostlink"
)

// Config tunes the API.
type Config struct {
	Version      string
	ReplicaID    string
	MaxBodyBytes int64         // JSON bodies; default 1 MiB
	MaxFileBytes int64         // file uploads; default 1 GiB
	WaitTimeout  time.Duration // how long create/delete wait to settle; default 5m
	OpenAPI      []byte        // served at GET /v1/openapi.yaml when set
}

// Deps are the API's collaborators: one service per router.
type Deps struct {
	Sessions SessionControl
	Reads    SessionReads // the store satisfies it
	Guests   Guests
	Fleet    FleetStore // the store satisfies it
	// Access authenticates keys and keeps keys, members and the audit
	// log (the store satisfies it).
	Access    AccessStore
	HostAdmin HostAdmin // disable, delete, revoke (the coordinator)
	Images    ImageService
	Harnesses HarnessService
	Secrets   SecretService
	Profiles  ProfileService
	Tasks     TaskService
	TaskReads TaskReads  // the store satisfies it
	Grants    GrantReads // the store satisfies it; nil: members drive no task
	Egress    EgressLog
	// Automations and Runs serve automations (nil: 503, the server runs
	// none).
	Automations AutomationService
	Runs        AutomationRuns
	// Integrations configures Slack, GitHub and Linear (nil: 503);
	// Builtins installs their built-in automations; Intake takes the
	// deliveries of signed webhooks and integrations (nil: 503).
	Integrations IntegrationService
	Builtins     Builtins
	Intake       Intake
	TaskPRs      TaskPRs // pull requests from tasks (nil: 503)
	// Idempotency keeps the answers of POSTs sent with an
	// Idempotency-Key (the store; nil: the header is ignored).
	Idempotency IdempotencyKeys
	// Changes feeds RouteChanges (the store; nil: no change feed).
	Changes Changes
	// Identities keeps the callers' accounts in the integrations (the
	// store; nil: 503).
	Identities IdentityStore
	// SignIn serves the sign-in routes (nil: not served).
	SignIn SignInRoutes
	Logger *slog.Logger
	Now    func() time.Time
	NewID  func() string
}

// AccessStore is what authentication, keys, members and the audit log
// use of the store.
type AccessStore interface {
	Keys
	KeyStore
	PeopleStore
	AuditLog
}

// SignInRoutes mounts the public sign-in routes (package signin).
type SignInRoutes interface {
	Route(h func(pattern string, fn http.HandlerFunc))
}

// base is what every router shares: the config, the clock and ids, and
// the helpers that decode requests and map errors.
type base struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	newID func() string
}

// Server is the public API handler: one router per resource, each with
// the small interface of what it needs.
type Server struct {
	*base
	mux   *http.ServeMux
	deps  Deps
	authn *authn
	audit *auditor
}

// New builds the handler.
func New(cfg Config, deps Deps) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 1 << 30
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = 5 * time.Minute
	}
	b := &base{cfg: cfg, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.newID == nil {
		b.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	s := &Server{base: b, mux: http.NewServeMux(), deps: deps}
	s.authn = &authn{base: b, st: deps.Access}
	if deps.Reads != nil {
		s.authn.owners.session = deps.Reads.GetSession
	}
	if deps.TaskReads != nil {
		s.authn.owners.task = deps.TaskReads.GetTask
	}
	s.authn.grants = deps.Grants
	s.audit = &auditor{base: b, st: deps.Access}
	s.routes()
	return s
}

// ruleOf is a route's access rule; a route without one is a bug, found
// when the server is built.
func ruleOf(rules map[string]access.Rule, pattern string, public bool) access.Rule {
	r, ok := rules[pattern]
	if !ok {
		panic("api: route " + pattern + " has no rule in access.Routes")
	}
	if (r.Need == access.Public) != public {
		panic("api: route " + pattern + " is served " + map[bool]string{true: "without", false: "with"}[public] + " a key but its rule needs " + r.Need.String())
	}
	return r
}

func (s *Server) routes() {
	rules := access.Routes()
	public := func(pattern string, fn http.HandlerFunc) {
		ruleOf(rules, pattern, true)
		s.mux.HandleFunc(pattern, checked(pattern, fn))
	}
	public(apiv1.RouteVersion, s.version)
	if len(s.cfg.OpenAPI) > 0 {
		public(apiv1.RouteOpenAPI, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(s.cfg.OpenAPI)
		})
	}
	h := func(pattern string, fn http.HandlerFunc) {
		rule := ruleOf(rules, pattern, false)
		var next http.Handler = fn
		if strings.HasPrefix(pattern, http.MethodPost+" ") && !streamedPOST(pattern) {
			next = s.idempotent(pattern, next)
		}
		// The path's shape is checked first: admission looks its {id} up.
		s.mux.HandleFunc(pattern, checked(pattern, s.authn.admit(rule, s.audit.wrap(rule, next)).ServeHTTP))
	}
	(&sessionsRouter{base: s.base, co: s.deps.Sessions, st: s.deps.Reads}).route(h)
	(&guestRouter{base: s.base, co: s.deps.Guests}).route(h)
	(&hostsRouter{base: s.base, st: s.deps.Fleet, admin: s.deps.HostAdmin}).route(h)
	(&keysRouter{base: s.base, st: s.deps.Access, admin: s.deps.HostAdmin}).route(h)
	(&peopleRouter{base: s.base, st: s.deps.Access}).route(h)
	(&identitiesRouter{base: s.base, st: s.deps.Identities}).route(h)
	(&imagesRouter{base: s.base, co: s.deps.Images}).route(h)
	(&harnessesRouter{base: s.base, co: s.deps.Harnesses}).route(h)
	(&secretsRouter{base: s.base, co: s.deps.Secrets}).route(h)
	(&profilesRouter{base: s.base, co: s.deps.Profiles}).route(h)
	(&egressRouter{base: s.base, co: s.deps.Egress}).route(h)
	(&tasksRouter{base: s.base, co: s.deps.Tasks, st: s.deps.TaskReads, guests: s.deps.Guests, profiles: s.deps.Profiles}).route(h)
	(&automationsRouter{base: s.base, co: s.deps.Automations, runs: s.deps.Runs}).route(h)
	(&integrationsRouter{base: s.base, co: s.deps.Integrations, builtins: s.deps.Builtins, prs: s.deps.TaskPRs}).route(h)
	(&deliveriesRouter{base: s.base, in: s.deps.Intake, runs: s.deps.Runs}).route(public)
	if s.deps.SignIn != nil {
		s.deps.SignIn.Route(public)
	}
	h(apiv1.RouteChanges, s.changes)
}

// streamedPOST are the POSTs an Idempotency-Key does not apply to: exec's
// NDJSON stream, and harness uploads (their bodies are archives, not
// requests to replay).
func streamedPOST(pattern string) bool {
	return pattern == apiv1.RouteExec || pattern == apiv1.RouteAddHarness
}

// ServeHTTP implements http.Handler. Requests no route matches get the
// mux's own 404 or 405 (with Allow), as JSON.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := &statusOnly{header: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch rec.status {
	case http.StatusMethodNotAllowed:
		writeError(w, rec.status, apiv1.CodeMethodNotAllowed, quote(r.Method)+" is not allowed on "+quote(r.URL.Path)+" (allowed: "+rec.header.Get("Allow")+")")
	default:
		writeError(w, http.StatusNotFound, apiv1.CodeNotFound, "no route "+quote(r.Method)+" "+quote(r.URL.Path)+" (see GET /v1/openapi.yaml)")
	}
}

// statusOnly records what the mux's fallback handler would answer.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, apiv1.Version{Version: s.cfg.Version, HostlinkProtocol: hostlink.Version, GuestAPI: guestAPIVersion, ReplicaID: s.cfg.ReplicaID})
}

// decode reads a bounded JSON body, refusing unknown fields, trailing data
// and strings holding NUL.
func (s *base) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.decodeWith(w, r, v, describeJSON)
}

// describeJSON says what was wrong with a malformed body, repeating at most
// a bounded prefix of what it quotes (an unknown field's name).
func describeJSON(err error) string {
	if msg, ok := unknownField(err); ok {
		return msg
	}
	if msg := err.Error(); len(msg) <= 4*maxEcho {
		return msg
	}
	return quote(err.Error())
}

// unknownField says which unknown field a decoder refused, its name quoted
// and bounded.
func unknownField(err error) (string, bool) {
	name, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	if n, uerr := strconv.Unquote(name); uerr == nil {
		name = n
	}
	return "unknown field " + quote(name), true
}

// decodeWith is decode with describe saying what was wrong with a malformed body.
func (s *base) decodeWith(w http.ResponseWriter, r *http.Request, v any, describe func(error) string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, apiv1.CodeTooLarge, "request body over "+itoa(s.cfg.MaxBodyBytes)+" bytes")
			return false
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(w, http.StatusRequestTimeout, apiv1.CodeBadRequest, "the request body came too slowly: "+err.Error())
			return false
		}
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "malformed JSON body: "+describe(err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "malformed JSON body: trailing data after the object")
		return false
	}
	if at := nulString(reflect.ValueOf(v), ""); at != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "field "+at+" holds a NUL character")
		return false
	}
	return true
}
