package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guest/adapter"
	"github.com/engrams/engrams/internal/guestapi"
)

// Config is the daemon's configuration.
type Config struct {
	// WorkDir is the default directory of executed commands ("/" if empty).
	WorkDir string
	// Env is the base environment ("K=V") of executed commands; ExecStart.Env
	// is merged over it. Nil means no base environment.
	Env []string
	// OutputGrace bounds how long output is still drained after a command
	// exited while a process it left behind keeps its stdout/stderr open.
	// Zero means 100ms.
	OutputGrace time.Duration
	// StateDir holds the daemon's durable state (the outbox journal and
	// applied seq). It must be on the guest's snapshotted disk. Empty means
	// DefaultStateDir.
	StateDir string
	// HarnessDir is where the harness bundle is mounted (guestapi.HarnessMountPoint
	// if empty); without a harness.json there the harness state is "none".
	HarnessDir string
	// HarnessHome is the harness processes' HOME, where they keep their
	// conversations; it must be on the snapshotted disk. Empty means
	// StateDir/harness-home.
	HarnessHome string
	// GatewayAddr is the model gateway listener's loopback TCP address
	// (DefaultGatewayAddr if empty; port 0 picks a free port, which
	// HarnessStatus.Gateway and the harness env then name).
	GatewayAddr string
	// HarnessStall: a turn whose harness prints nothing this long is
	// stopped with an error (10 minutes if zero).
	HarnessStall time.Duration
	// HarnessGrace: an interrupted harness gets SIGINT, then SIGKILL after
	// this long (5 seconds if zero).
	HarnessGrace time.Duration
}

// DefaultStateDir is the guest daemon's default state directory.
const DefaultStateDir = "/var/lib/engrams"

// Deps are the daemon's collaborators.
type Deps struct {
	Logger *slog.Logger // nil: discard
}

// Server serves the guest API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	started time.Time
	outbox  *outbox
	gw      *gateway
	harness harnessAdapter
}

// maxControlMessage bounds ExecStart and Control text messages.
const maxControlMessage = 64 << 10

// maxFrame bounds any WebSocket message (stdin frames included).
const maxFrame = 1 << 20

// New returns a Server.
func New(cfg Config, deps Deps) *Server {
	if cfg.WorkDir == "" {
		cfg.WorkDir = "/"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.OutputGrace <= 0 {
		cfg.OutputGrace = 100 * time.Millisecond
	}
	if cfg.HarnessDir == "" {
		cfg.HarnessDir = guestapi.HarnessMountPoint
	}
	if cfg.HarnessHome == "" {
		cfg.HarnessHome = filepath.Join(cfg.StateDir, "harness-home")
	}
	if cfg.GatewayAddr == "" {
		cfg.GatewayAddr = DefaultGatewayAddr
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, started: time.Now(), gw: newGateway(log), outbox: &outbox{dir: cfg.StateDir}}
	s.harness = adapter.New(adapter.Config{
		WorkDir: cfg.WorkDir, Env: cfg.Env, StateDir: cfg.StateDir, HarnessDir: cfg.HarnessDir, HarnessHome: cfg.HarnessHome,
		GatewayAddr: cfg.GatewayAddr, HarnessStall: cfg.HarnessStall, HarnessGrace: cfg.HarnessGrace,
	}, adapter.Deps{Logger: log, Gateway: s.gw, Journal: s.outbox})
	s.outbox.notify = s.harness.Notify
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, s.handleReady)
	mux.HandleFunc("GET "+guestapi.PathExec, s.handleExec)
	mux.HandleFunc("POST "+guestapi.PathExecRun, s.handleExecRun)
	mux.HandleFunc("GET "+guestapi.PathFiles, s.handleDownload)
	mux.HandleFunc("PUT "+guestapi.PathFiles, s.handleUpload)
	mux.HandleFunc("GET "+guestapi.PathFileList, s.handleList)
	mux.HandleFunc("GET "+guestapi.PathFileStat, s.handleStat)
	mux.HandleFunc("POST "+guestapi.PathSync, s.handleSync)
	mux.HandleFunc("GET "+guestapi.PathOutbox, s.handleOutboxGet)
	mux.HandleFunc("POST "+guestapi.PathOutbox, s.handleOutboxPost)
	mux.HandleFunc("GET "+guestapi.PathHarness, s.handleHarness)
	mux.HandleFunc("GET "+guestapi.PathHarnessEvents, s.handleHarnessEvents)
	mux.HandleFunc("GET "+guestapi.PathTunnel, s.handleTunnel)
	allowed := map[string]string{
		guestapi.PathReady: "GET", guestapi.PathExec: "GET", guestapi.PathExecRun: "POST", guestapi.PathFiles: "GET, PUT",
		guestapi.PathFileList: "GET", guestapi.PathFileStat: "GET",
		guestapi.PathSync: "POST", guestapi.PathOutbox: "GET, POST",
		guestapi.PathHarness: "GET", guestapi.PathHarnessEvents: "GET", guestapi.PathTunnel: "GET",
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := allowed[r.URL.Path]; ok {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow))
			return
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	s.handler = s.versioned(mux)
	return s
}

// Handler returns the daemon's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Run runs the harness adapter and the model gateway listener until ctx
// is done: prompts applied through the outbox run as harness turns, one at
// a time. It joins everything it started; tunnel and event stream
// requests are joined by Serve. The daemon calls it once, beside Serve.
func (s *Server) Run(ctx context.Context) error { return s.harness.Run(ctx) }

// Serve serves the API on ln until ctx is done or ln fails, at most
// maxConns connections at once. It closes ln, ends running commands when
// ctx is done, and joins every handler.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = newLimitListener(ln, maxConns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var active tracker // handlers, including hijacked exec streams Shutdown does not wait for
	srv := &http.Server{
		Handler:           active.wrap(s.handler),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
		_ = srv.Close()
		<-errc
	case err = <-errc:
		cancel() // ends hijacked exec streams served from this listener
		_ = srv.Close()
	}
	active.closeAndWait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

func (s *Server) versioned(next http.Handler) http.Handler {
	want := strconv.Itoa(guestapi.Version)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(guestapi.HeaderVersion, want)
		if got := r.Header.Get(guestapi.HeaderVersion); got != "" && got != want {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(
				"guest API version mismatch: request has %s=%s, daemon speaks %s", guestapi.HeaderVersion, got, want))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	host, _ := os.Hostname()
	writeJSON(w, http.StatusOK, guestapi.Ready{
		Version:  guestapi.Version,
		BootID:   readTrim("/proc/sys/kernel/random/boot_id"),
		PID:      os.Getpid(),
		Hostname: host,
		Kernel:   kernelRelease(),
		Uptime:   s.uptime(),
	})
}

func (s *Server) uptime() float64 {
	if f := strings.Fields(readTrim("/proc/uptime")); len(f) > 0 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return time.Since(s.started).Seconds()
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, guestapi.ErrorBody{Error: msg})
}

// tracker counts running handlers so Serve can join them, hijacked ones too.
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{}
}

func (t *tracker) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "guest daemon is shutting down")
			return
		}
		t.n++
		t.mu.Unlock()
		defer t.leave()
		h.ServeHTTP(w, r)
	})
}

func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	t.idle = idle
	t.mu.Unlock()
	<-idle
}
