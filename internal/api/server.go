package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// Coordinator is what the API asks to change sessions and images.
type Coordinator interface {
	CreateSession(ctx context.Context, spec hostlink.MachineSpec, idempotencyKey string) (store.Session, error)
	DeleteSession(ctx context.Context, id string) (store.Session, error)
	WaitSession(ctx context.Context, id string, done func(store.Session) bool) (store.Session, error)
	Guest(ctx context.Context, id string) (coordinator.GuestTarget, error)
	Suspend(ctx context.Context, id string) (store.Session, store.Op, error)
	WaitOp(ctx context.Context, op store.Op) (store.Op, store.Session, error)
	Resume(ctx context.Context, id string) (store.Session, error)
	Snapshot(ctx context.Context, id string) (store.Snapshot, error)
	PutOutbox(ctx context.Context, sessionID, id, kind string, payload json.RawMessage) (store.OutboxItem, error)

	EnableImage(ctx context.Context, req coordinator.EnableImageRequest) (coordinator.ImageView, store.ImageJob, error)
	RefreshImage(ctx context.Context, nameOrID string) (coordinator.ImageView, store.ImageJob, error)
	DisableImage(ctx context.Context, nameOrID string) (coordinator.ImageView, error)
	Image(ctx context.Context, nameOrID string) (coordinator.ImageView, error)
	Images(ctx context.Context, all bool) ([]coordinator.ImageView, error)
	ImageJobs(ctx context.Context, nameOrID string) ([]store.ImageJob, error)
	ImageJob(ctx context.Context, id string) (store.ImageJob, error)

	BuildHarness(ctx context.Context, req coordinator.BuildHarnessRequest) (coordinator.HarnessView, error)
	AddHarness(ctx context.Context, tarball io.Reader) (coordinator.HarnessView, error)
	Harnesses(ctx context.Context) ([]coordinator.HarnessView, error)
	Harness(ctx context.Context, name, version string) (coordinator.HarnessView, error)
	CreateSecret(ctx context.Context, req coordinator.SecretRequest) (coordinator.SecretView, error)
	Secrets(ctx context.Context) ([]coordinator.SecretView, error)
	DeleteSecret(ctx context.Context, nameOrID string) (coordinator.SecretView, error)
	CreateProfile(ctx context.Context, name string, spec apiv1.ProfileSpec) (coordinator.ProfileView, error)
	Profiles(ctx context.Context) ([]coordinator.ProfileView, error)
	Profile(ctx context.Context, nameOrID string) (coordinator.ProfileView, error)
	UpdateProfile(ctx context.Context, nameOrID string, spec apiv1.ProfileSpec, version int64) (coordinator.ProfileView, error)
	DeleteProfile(ctx context.Context, nameOrID string) (coordinator.ProfileView, error)

	StartTask(ctx context.Context, req coordinator.StartTaskRequest) (store.Task, error)
	SendTask(ctx context.Context, taskID, text string) (store.TaskEvent, error)
	StopTask(ctx context.Context, taskID string) (store.Task, error)
	TaskDiff(ctx context.Context, taskID string) ([]coordinator.RepoDiff, error)
	TaskSession(ctx context.Context, taskID string) (store.Task, error)
}

// Store is what the API reads, plus the host and token rows it manages.
type Store interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error)
	ListOps(ctx context.Context, sessionID string) ([]store.Op, error)
	ListSnapshots(ctx context.Context, sessionID string) ([]store.Snapshot, error)
	ListOutbox(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.OutboxItem, error)
	ListEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error)
	Subscribe(ctx context.Context, topic string) <-chan struct{}
	GetHost(ctx context.Context, id string) (store.Host, error)
	ListHosts(ctx context.Context) ([]store.Host, error)
	SetHostState(ctx context.Context, id string, state store.HostState) error
	CreateHost(ctx context.Context, h store.Host, tok store.Token) error
	CreateToken(ctx context.Context, t store.Token) error
	TokenByHash(ctx context.Context, hash string) (store.Token, error)
	ListTokens(ctx context.Context) ([]store.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	GetTask(ctx context.Context, id string) (store.Task, error)
	ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
	ListTaskSessions(ctx context.Context, taskID string) ([]store.TaskSession, error)
	ListTaskEvents(ctx context.Context, taskID string, afterSeq int64, limit int) ([]store.TaskEvent, error)
}

// Config tunes the API.
type Config struct {
	Version      string
	ReplicaID    string
	MaxBodyBytes int64         // JSON bodies; default 1 MiB
	MaxFileBytes int64         // file uploads; default 1 GiB
	WaitTimeout  time.Duration // how long create/delete wait to settle; default 5m
	OpenAPI      []byte        // served at GET /v1/openapi.yaml when set
}

// Deps are the API's collaborators.
type Deps struct {
	Coordinator Coordinator
	Store       Store
	Logger      *slog.Logger
	Now         func() time.Time
	NewID       func() string
}

// Server is the public API handler.
type Server struct {
	cfg   Config
	co    Coordinator
	st    Store
	log   *slog.Logger
	now   func() time.Time
	newID func() string
	mux   *http.ServeMux
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
	s := &Server{cfg: cfg, co: deps.Coordinator, st: deps.Store, log: deps.Logger, now: deps.Now, newID: deps.NewID, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	h := func(pattern string, fn http.HandlerFunc) { s.mux.Handle(pattern, s.auth(fn)) }
	s.mux.HandleFunc(apiv1.RouteVersion, s.version)
	if len(s.cfg.OpenAPI) > 0 {
		s.mux.HandleFunc(apiv1.RouteOpenAPI, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(s.cfg.OpenAPI)
		})
	}
	h(apiv1.RouteCreateSession, s.createSession)
	h(apiv1.RouteListSessions, s.listSessions)
	h(apiv1.RouteGetSession, s.getSession)
	h(apiv1.RouteDeleteSession, s.deleteSession)
	h(apiv1.RouteExec, s.exec)
	h(apiv1.RouteExecWS, s.proxyGuest("/v1/exec"))
	h(apiv1.RouteFileGet, s.proxyGuest("/v1/files"))
	h(apiv1.RouteFilePut, s.proxyGuest("/v1/files"))
	h(apiv1.RouteFileList, s.proxyGuest("/v1/files/list"))
	h(apiv1.RouteFileStat, s.proxyGuest("/v1/files/stat"))
	h(apiv1.RouteEvents, s.events)
	h(apiv1.RouteSuspend, s.suspend)
	h(apiv1.RouteResume, s.resume)
	h(apiv1.RouteSnapshot, s.snapshot)
	h(apiv1.RouteOutboxPut, s.putOutbox)
	h(apiv1.RouteOutboxList, s.listOutbox)
	h(apiv1.RouteListHosts, s.listHosts)
	h(apiv1.RouteGetHost, s.getHost)
	h(apiv1.RouteDrainHost, s.drainHost)
	h(apiv1.RouteCreateHost, s.createHost)
	h(apiv1.RouteCreateToken, s.createToken)
	h(apiv1.RouteListTokens, s.listTokens)
	h(apiv1.RouteRevokeToken, s.revokeToken)
	h(apiv1.RouteEnableImage, s.enableImage)
	h(apiv1.RouteListImages, s.listImages)
	h(apiv1.RouteGetImage, s.getImage)
	h(apiv1.RouteDisableImage, s.disableImage)
	h(apiv1.RouteRefreshImage, s.refreshImage)
	h(apiv1.RouteImageJobs, s.listImageJobs)
	h(apiv1.RouteGetImageJob, s.getImageJob)
	h(apiv1.RouteBuildHarness, s.buildHarness)
	h(apiv1.RouteAddHarness, s.addHarness)
	h(apiv1.RouteListHarnesses, s.listHarnesses)
	h(apiv1.RouteGetHarness, s.getHarness)
	h(apiv1.RouteCreateSecret, s.createSecret)
	h(apiv1.RouteListSecrets, s.listSecrets)
	h(apiv1.RouteDeleteSecret, s.deleteSecret)
	h(apiv1.RouteCreateProfile, s.createProfile)
	h(apiv1.RouteListProfiles, s.listProfiles)
	h(apiv1.RouteGetProfile, s.getProfile)
	h(apiv1.RouteUpdateProfile, s.updateProfile)
	h(apiv1.RouteDeleteProfile, s.deleteProfile)
	h(apiv1.RouteStartTask, s.startTask)
	h(apiv1.RouteListTasks, s.listTasks)
	h(apiv1.RouteGetTask, s.getTask)
	h(apiv1.RouteTaskEvents, s.taskEvents)
	h(apiv1.RouteSendTask, s.sendTask)
	h(apiv1.RouteStopTask, s.stopTask)
	h(apiv1.RouteTaskDiff, s.taskDiff)
	h(apiv1.RouteTaskFiles, s.taskFiles)
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
		writeError(w, rec.status, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+rec.header.Get("Allow")+")")
	default:
		writeError(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path+" (see GET /v1/openapi.yaml)")
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

// decode reads a bounded JSON body, refusing unknown fields and trailing data.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.decodeWith(w, r, v, func(err error) string { return err.Error() })
}

// decodeWith is decode with describe saying what was wrong with a malformed body.
func (s *Server) decodeWith(w http.ResponseWriter, r *http.Request, v any, describe func(error) string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", "request body over "+itoa(s.cfg.MaxBodyBytes)+" bytes")
			return false
		}
		writeError(w, http.StatusBadRequest, "bad_request", "malformed JSON body: "+describe(err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_request", "malformed JSON body: trailing data after the object")
		return false
	}
	return true
}
