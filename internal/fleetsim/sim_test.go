package fleetsim

// How this runs under testing/synctest.
//
// Everything of one seed lives inside one synctest bubble: the SQLite store
// (opened inside it, so database/sql's opener goroutines and modernc's
// interrupt watchers belong to the bubble and block durably on bubble
// channels), the real coordinator with its op workers and monitor, every
// simulated host's heartbeat loop and the clients. SQLite does real file
// I/O in a temp dir; a goroutine in a system call is not durably blocked,
// so fake time simply waits for it: every query takes zero fake time. The
// simulation itself never blocks on a mutex while another goroutine sleeps
// (one world mutex, never held across a sleep or a coordinator call;
// per-session host locks are channels), so fake time always advances.
//
// The seeded RNG is used only by the driver goroutine: the event schedule,
// its fake times and every delay a host will apply are a pure function of
// the seed. Goroutines woken at the same fake instant still interleave as
// the Go scheduler likes; the driver adds a random sub-millisecond offset
// to its own instants so they rarely coincide with the coordinator's
// tickers, and after each step it waits (synctest.Wait) until every other
// goroutine is durably blocked before asserting, so the checks read a
// frozen world.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// simEpoch is where fake time starts in a synctest bubble.
var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is fake time since the start of the run.
func clock() string { return fmt.Sprintf("%.3fs", time.Since(simEpoch).Seconds()) }

const (
	numHosts     = 3
	hostCapacity = 4
	maxSessions  = 7
)

func simConfig() coordinator.Config {
	return coordinator.Config{
		ReplicaID: "r1", HeartbeatInterval: time.Second, HostLostAfter: 6 * time.Second,
		OpLease: 10 * time.Second, PlacementWait: 3 * time.Second, ResumeWait: 30 * time.Second,
		IdleTimeout: 20 * time.Second, Workers: 3,
	}
}

// sim drives one seed.
type sim struct {
	t       *testing.T
	seed    uint64
	opts    options
	rng     *rand.Rand
	w       *world
	st      *sqlite.Store
	co      *coordinator.Coordinator
	ctx     context.Context // clients' context; cancelled at the end
	cancel  context.CancelFunc
	clients sync.WaitGroup

	mu    sync.Mutex // guards steps (clients log too)
	steps []string
	clog  *logBuf

	sessions []domain.SessionID            // every session created, in order
	acked    map[domain.SessionID][]string // session -> outbox item ids PutOutbox acknowledged
	items    int
	heals    map[*host]time.Time        // partitioned hosts and when they heal
	backs    map[*host]time.Time        // crashed hosts and when they restart
	checked  map[domain.SessionID]int64 // session -> last event seq checked
	state    map[domain.SessionID]domain.SessionState
}

func (s *sim) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, fmt.Sprintf("%9s  ", clock())+fmt.Sprintf(format, args...))
}

// newSim opens the store, starts the coordinator and boots the hosts; the
// returned stop shuts everything down and joins every goroutine.
func newSim(t *testing.T, seed uint64, dir string, opts options) (*sim, func()) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, seed: seed, opts: opts, rng: rand.New(rand.NewPCG(seed, 0x5eed)), w: newWorld(), st: st, clog: &logBuf{},
		acked: map[domain.SessionID][]string{}, heals: map[*host]time.Time{}, backs: map[*host]time.Time{},
		checked: map[domain.SessionID]int64{}, state: map[domain.SessionID]domain.SessionState{}}
	var ids atomic.Int64
	s.co, err = coordinator.New(simConfig(), coordinator.Deps{
		Store: st, Hosts: s.w, Logger: slog.New(s.clog.handler()),
		NewID: func() string { return fmt.Sprintf("id%05d", ids.Add(1)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	hostMux := http.NewServeMux()
	s.co.RouteHostLink(hostMux)
	s.w.hostH = hostMux
	s.w.sabotage = opts.sabotage
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = s.co.Run(runCtx); close(ran) }()
	s.ctx, s.cancel = context.WithCancel(ctx)
	for i := range numHosts {
		s.addHost(fmt.Sprintf("h%d", i))
	}
	return s, func() {
		s.cancel()
		s.clients.Wait()
		for _, h := range s.w.hosts {
			h.shutdown()
		}
		stopRun()
		<-ran
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}
}

func (s *sim) addHost(name string) {
	id := domain.HostID("host-" + name)
	now := time.Now()
	err := s.st.CreateHost(context.Background(), domain.Host{ID: id, Name: name, State: domain.HostNew, CreatedAt: now},
		domain.Token{ID: "tok-" + name, Name: name, Kind: domain.TokenHost, HostID: id, Prefix: "p",
			Hash: coordinator.HashToken("secret-" + name), CreatedAt: now})
	if err != nil {
		s.t.Fatal(err)
	}
	s.w.mu.Lock()
	newHost(s.w, id, name, hostCapacity).bootLocked()
	s.w.mu.Unlock()
}

// pick returns a random element of xs (the zero value for none).
func pick[T any](r *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[r.IntN(len(xs))], true
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// hostsWhere lists hosts matching f, in a stable order.
func (s *sim) hostsWhere(f func(h *host) bool) []*host {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	var out []*host
	for _, h := range s.w.hosts {
		if f(h) {
			out = append(out, h)
		}
	}
	return out
}

// client runs f as a concurrent API caller (joined at the end).
func (s *sim) client(f func(ctx context.Context)) {
	s.clients.Add(1)
	go func() {
		defer s.clients.Done()
		f(s.ctx)
	}()
}

// logBuf keeps the coordinator's log (printed for a failing seed).
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuf) handler() slog.Handler { return &bufHandler{b: b} }

func (b *logBuf) tail(n int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines[max(0, len(b.lines)-n):])
}

type bufHandler struct {
	b     *logBuf
	attrs []slog.Attr
}

func (h *bufHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *bufHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%9s  %s %s", clock(), r.Level, r.Message)
	for _, a := range h.attrs {
		if a.Key != "replica_id" {
			fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		}
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	})
	h.b.mu.Lock()
	h.b.lines = append(h.b.lines, sb.String())
	h.b.mu.Unlock()
	return nil
}

func (h *bufHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &bufHandler{b: h.b, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *bufHandler) WithGroup(string) slog.Handler { return h }
