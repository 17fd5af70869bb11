package coordinatortest

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// Env is a running coordinator with its store and its fake fleet.
type Env struct {
	St    store.Store
	Co    *coordinator.Coordinator
	Fleet *Fleet
}

// NewStore opens a SQLite store in the test's temp dir, closed at cleanup.
func NewStore(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// NewFleet returns a fleet with no hosts.
func NewFleet() *Fleet {
	return &Fleet{hosts: map[domain.HostID]*FakeHost{}, down: map[domain.HostID]int{}, snaps: NewSnapStore()}
}

// New runs a coordinator (replica "r1" unless cfg names one) on a fresh
// store and fleet until the test ends. deps gives the collaborators besides
// those two (Images, Harnesses, roots, observers); build binds ones that
// need the store and fleet first (nil: none).
func New(t testing.TB, cfg coordinator.Config, build func(st store.Store, f *Fleet) coordinator.Deps) *Env {
	t.Helper()
	st, f := NewStore(t), NewFleet()
	var deps coordinator.Deps
	if build != nil {
		deps = build(st, f)
	}
	deps.Store, deps.Hosts = st, f
	return Run(t, cfg, st, deps, f)
}

// Run runs a coordinator with deps (whose Store is st and Hosts f) until
// the test ends.
func Run(t testing.TB, cfg coordinator.Config, st store.Store, deps coordinator.Deps, f *Fleet) *Env {
	t.Helper()
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "r1"
	}
	co, err := coordinator.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = co.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &Env{St: st, Co: co, Fleet: f}
}

// AddHost creates, registers and connects a fake host with room for n 256
// MiB sessions.
func (e *Env) AddHost(t testing.TB, name string, n int) (domain.HostID, *FakeHost) {
	t.Helper()
	return e.AddHostWith(t, name, n, TestFacts)
}

// AddHostWith is AddHost for a host with other facts.
func (e *Env) AddHostWith(t testing.TB, name string, n int, hf domain.HostFacts) (domain.HostID, *FakeHost) {
	t.Helper()
	return e.Fleet.Add(t, e.St, name, n, hf)
}

// Add creates, registers and connects a fake host in st.
func (f *Fleet) Add(t testing.TB, st store.Store, name string, n int, hf domain.HostFacts) (domain.HostID, *FakeHost) {
	t.Helper()
	ctx := context.Background()
	id := domain.HostID("host-" + name)
	if err := st.CreateHost(ctx, domain.Host{ID: id, Name: name, State: domain.HostNew, CreatedAt: time.Now()},
		domain.Token{ID: "tok-" + name, Name: name, Kind: domain.TokenHost, HostID: id, Prefix: "p",
			Hash: coordinator.HashToken("secret-" + name), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	capa := domain.Capacity{MemoryMiB: 256 * n, VCPUs: n}
	if err := st.RegisterHost(ctx, domain.Host{ID: id, Name: name, Facts: hf, Capacity: capa, ReplicaID: "r1",
		LastHeartbeat: time.Now(), ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h := &FakeHost{machines: map[string]int64{}, epochs: map[string]int64{}, applied: map[string]int64{}, snaps: f.snaps}
	f.mu.Lock()
	f.hosts[id] = h
	f.mu.Unlock()
	return id, h
}

// Down makes the next n calls to host id fail as unreachable.
func (f *Fleet) Down(id domain.HostID, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[id] = n
}

// Remove makes host id unreachable.
func (f *Fleet) Remove(id domain.HostID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.hosts, id)
}

// Snaps is what the fleet's snapshots captured (the blob store's part).
func (f *Fleet) Snaps() *SnapStore { return f.snaps }

// KeepAlive heartbeats for host id every 50 ms until stop is called or the
// test ends.
func (e *Env) KeepAlive(t testing.TB, id domain.HostID) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			h, err := e.St.GetHost(context.Background(), id)
			if err == nil {
				_, _ = e.St.HostHeartbeat(context.Background(), id, &h.Capacity, time.Now())
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-finished }) }
	t.Cleanup(stop)
	return stop
}

// Wait waits (10 s at most) until session id is in state want.
func (e *Env) Wait(t testing.TB, id domain.SessionID, want domain.SessionState) domain.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.Co.WaitSession(ctx, id, func(s domain.Session) bool { return s.State == want })
	if err != nil {
		t.Fatalf("session %s never reached %s (reason %q): %v", id, want, s.Reason, err)
	}
	return s
}

// HostLink is the coordinator's host-link handler (register, heartbeat),
// as a host's requests reach it.
func (e *Env) HostLink() http.Handler {
	mux := http.NewServeMux()
	e.Co.RouteHostLink(mux)
	return mux
}
