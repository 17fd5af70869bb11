package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// fakeHost is a host's machine API in memory: it keeps the highest epoch
// per session like a real host and refuses lower ones. Its guests apply
// outbox items; what a guest applied travels inside its snapshots, like a
// real guest's disk.
type fakeHost struct {
	mu       sync.Mutex
	machines map[string]int64 // session -> epoch
	epochs   map[string]int64
	applied  map[string]int64 // session -> outbox seq its running guest applied
	failBoot bool
	warmFail string // captures answer warmup_failed with this tail
	captures []hostlink.CaptureRequest
	starts   []hostlink.StartRequest
	full     bool // answer 409 capacity
	corrupt  bool // restores fail: snapshot_corrupt
	deletes  int
	snaps    *snapStore
}

// snapStore plays the blob store: what each snapshot captured, shared by
// every fake host, and every application of an outbox item per lineage.
type snapStore struct {
	mu        sync.Mutex
	applied   map[string]int64          // snapshot -> guest applied seq
	effects   map[string]map[string]int // session -> item id -> times applied in the surviving lineage
	snapItems map[string]map[string]int // snapshot -> effects at capture
}

func newSnapStore() *snapStore {
	return &snapStore{applied: map[string]int64{}, effects: map[string]map[string]int{}, snapItems: map[string]map[string]int{}}
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (h *fakeHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/captures/"); ok {
		h.capture(w, r, id)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v1/machines/")
	id, sub, _ := strings.Cut(rest, "/")
	epoch, _ := strconv.ParseInt(r.Header.Get(hostlink.HeaderEpoch), 10, 64)
	if epoch < h.epochs[id] {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: "stale_epoch", Error: "stale"})
		return
	}
	h.epochs[id] = epoch
	switch {
	case r.Method == http.MethodPut:
		h.start(w, r, id, epoch)
	case r.Method == http.MethodDelete:
		delete(h.machines, id)
		h.deletes++
		w.WriteHeader(http.StatusNoContent)
	case sub == "snapshot":
		h.snapshot(w, r, id)
	case sub == "outbox":
		h.outbox(w, r, id)
	}
}

func (h *fakeHost) start(w http.ResponseWriter, r *http.Request, id string, epoch int64) {
	var req hostlink.StartRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.starts = append(h.starts, req)
	switch {
	case h.full:
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: "capacity", Error: "no room"})
		return
	case h.failBoot:
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Error: "kernel panic"})
		return
	case req.Restore != nil && h.corrupt:
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: "snapshot_corrupt", Error: "chunk 3 hash mismatch"})
		return
	}
	h.machines[id] = epoch
	h.applied[id] = 0
	if req.Restore != nil {
		h.snaps.mu.Lock()
		h.applied[id] = h.snaps.applied[req.Restore.SnapshotID]
		h.snaps.effects[id] = copyCounts(h.snaps.snapItems[req.Restore.SnapshotID]) // roll back to the snapshot's lineage
		h.snaps.mu.Unlock()
	}
	_ = json.NewEncoder(w).Encode(hostlink.MachineStatus{SessionID: id, Epoch: epoch, State: "running"})
}

func (h *fakeHost) snapshot(w http.ResponseWriter, r *http.Request, id string) {
	var req hostlink.SnapshotRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	if _, ok := h.machines[id]; !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: "not_found", Error: "no machine"})
		return
	}
	h.snaps.mu.Lock()
	h.snaps.applied[req.SnapshotID] = h.applied[id]
	h.snaps.snapItems[req.SnapshotID] = copyCounts(h.snaps.effects[id])
	h.snaps.mu.Unlock()
	if req.Destroy {
		delete(h.machines, id)
	}
	_ = json.NewEncoder(w).Encode(hostlink.SnapshotResponse{SnapshotID: req.SnapshotID, Manifests: json.RawMessage(`{}`),
		Facts: testFacts, Bytes: 100, Uploaded: 10, OutboxSeq: h.applied[id]})
}

func (h *fakeHost) outbox(w http.ResponseWriter, r *http.Request, id string) {
	var req hostlink.OutboxDelivery
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.snaps.mu.Lock()
	if h.snaps.effects[id] == nil {
		h.snaps.effects[id] = map[string]int{}
	}
	for _, it := range req.Items {
		if it.Seq == h.applied[id]+1 {
			h.applied[id] = it.Seq
			h.snaps.effects[id][it.ID]++
		}
	}
	h.snaps.mu.Unlock()
	_ = json.NewEncoder(w).Encode(hostlink.OutboxApplied{Applied: h.applied[id]})
}

var testFacts = hostlink.Facts{Arch: "amd64", Backend: hostlink.BackendFacts{Name: "fake", Version: "1", Acceleration: "none", RootFS: true, Harness: true}}

func (h *fakeHost) running(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.machines[id]
	return ok
}

// fleet routes to fake hosts; a host missing from the map is unreachable.
type fleet struct {
	mu    sync.Mutex
	hosts map[string]*fakeHost
	down  map[string]int // host -> calls to fail as unreachable
	snaps *snapStore
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (f *fleet) Transport(_ context.Context, hostID domain.HostID) (http.RoundTripper, error) {
	f.mu.Lock()
	h := f.hosts[hostID]
	if f.down[hostID] > 0 {
		f.down[hostID]--
		h = nil
	}
	f.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("host %s: %w", hostID, hostlink.ErrHostNotConnected)
	}
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	}), nil
}

type env struct {
	st    store.Store
	co    *Coordinator
	fleet *fleet
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	return newEnvWith(t, cfg, Deps{})
}

// newEnvWith is newEnv with extra collaborators (Images, Secrets).
func newEnvWith(t *testing.T, cfg Config, extra Deps) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = "r1"
	}
	f := &fleet{hosts: map[string]*fakeHost{}, down: map[string]int{}, snaps: newSnapStore()}
	co, err := New(cfg, Deps{Store: st, Hosts: f, Images: extra.Images, Secrets: extra.Secrets})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = co.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{st: st, co: co, fleet: f}
}

// addHost creates, registers and connects a fake host with room for n 256 MiB sessions.
func (e *env) addHost(t *testing.T, name string, n int) (string, *fakeHost) {
	t.Helper()
	return e.addHostWith(t, name, n, testFacts)
}

// addHostWith is addHost for a host with other facts.
func (e *env) addHostWith(t *testing.T, name string, n int, hf hostlink.Facts) (string, *fakeHost) {
	t.Helper()
	ctx := context.Background()
	id := "host-" + name
	if err := e.st.CreateHost(ctx, domain.Host{ID: id, Name: name, State: domain.HostNew, CreatedAt: time.Now()},
		domain.Token{ID: "tok-" + name, Name: name, Kind: domain.TokenHost, HostID: id, Prefix: "p", Hash: HashToken("secret-" + name), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	capa, _ := json.Marshal(hostlink.Capacity{MemoryMiB: 256 * n, VCPUs: n})
	facts, _ := json.Marshal(hf)
	if err := e.st.RegisterHost(ctx, domain.Host{ID: id, Name: name, Facts: facts, Capacity: capa, ReplicaID: "r1", LastHeartbeat: time.Now(), ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{machines: map[string]int64{}, epochs: map[string]int64{}, applied: map[string]int64{}, snaps: e.fleet.snaps}
	e.fleet.mu.Lock()
	e.fleet.hosts[id] = h
	e.fleet.mu.Unlock()
	return id, h
}

// keepAlive heartbeats for host id every 50 ms until stop is called or the
// test ends.
func (e *env) keepAlive(t *testing.T, id string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			h, err := e.st.GetHost(context.Background(), id)
			if err == nil {
				_, _ = e.st.HostHeartbeat(context.Background(), id, h.Capacity, time.Now())
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

func (e *env) wait(t *testing.T, id string, want domain.SessionState) domain.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.co.WaitSession(ctx, id, func(s domain.Session) bool { return s.State == want })
	if err != nil {
		t.Fatalf("session %s never reached %s (reason %q): %v", id, want, s.Reason, err)
	}
	return s
}

func TestCreateBootsOnAHostAndDeleteDestroys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	hostID, h := e.addHost(t, "a", 4)
	ctx := context.Background()
	s, err := e.co.CreateSession(ctx, domain.SessionSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	s = e.wait(t, s.ID, domain.SessionActive)
	if s.HostID != hostID || !h.running(s.ID) {
		t.Fatalf("active on %q, running=%v; want on %s", s.HostID, h.running(s.ID), hostID)
	}
	spec, _ := Spec(s)
	if spec.MemoryMiB != 256 || spec.VCPUs != 1 {
		t.Fatalf("defaults not applied: %+v", spec)
	}
	if _, err := e.co.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	e.wait(t, s.ID, domain.SessionCompleted)
	if h.running(s.ID) {
		t.Fatal("machine still running after delete")
	}
	evs, _ := e.st.ListEvents(ctx, s.ID, 0, 100)
	var path []string
	for _, ev := range evs {
		var d struct{ To string }
		_ = json.Unmarshal(ev.Data, &d)
		if ev.Type == "state" {
			path = append(path, d.To)
		}
	}
	if got := strings.Join(path, ">"); got != "starting>active>deleting>completed" {
		t.Fatalf("state events %s", got)
	}
}

func TestCreateFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		setup      func(t *testing.T, e *env)
		spec       domain.SessionSpec
		wantState  domain.SessionState
		wantReason string
	}{
		{name: "no hosts", wantState: domain.SessionDead, wantReason: "no hosts are registered"},
		{name: "boot fails", setup: func(t *testing.T, e *env) { _, h := e.addHost(t, "a", 2); h.failBoot = true },
			wantState: domain.SessionDead, wantReason: "kernel panic"},
		{name: "too big for any host", setup: func(t *testing.T, e *env) { e.addHost(t, "a", 1) },
			spec: domain.SessionSpec{MemoryMiB: 512}, wantState: domain.SessionDead, wantReason: "256 MiB free, 512 MiB asked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{PlacementWait: time.Second})
			if tt.setup != nil {
				tt.setup(t, e)
			}
			s, err := e.co.CreateSession(context.Background(), tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err = e.co.WaitSession(ctx, s.ID, Settled)
			if err != nil || s.State != tt.wantState || !strings.Contains(s.Reason, tt.wantReason) {
				t.Fatalf("got %s %q (%v); want %s with reason containing %q", s.State, s.Reason, err, tt.wantState, tt.wantReason)
			}
		})
	}
}

func TestCreateRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, spec := range []domain.SessionSpec{
		{MemoryMiB: 1}, {MemoryMiB: 1 << 30}, {VCPUs: -1}, {VCPUs: 99}, {Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"A": "x\x00y"}}, {Env: map[string]string{"A": strings.Repeat("x", 70<<10)}},
		{Image: "a b"}, {Image: strings.Repeat("i", 600)},
	} {
		if _, err := e.co.CreateSession(context.Background(), spec, ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("spec %+v: err %v, want ErrInvalid", spec, err)
		}
	}
	if ss, _ := e.st.ListSessions(context.Background(), domain.SessionFilter{}); len(ss) != 0 {
		t.Fatalf("bad input created %d sessions", len(ss))
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.addHost(t, "a", 4)
	a, err := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
	if err != nil || a.ID != b.ID {
		t.Fatalf("second create: %v, id %s vs %s", err, b.ID, a.ID)
	}
}

func TestHostLostMakesActiveSessionsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{HeartbeatInterval: 50 * time.Millisecond, HostLostAfter: 300 * time.Millisecond, MonitorInterval: 50 * time.Millisecond})
	hostID, _ := e.addHost(t, "a", 4)
	stop := e.keepAlive(t, hostID)
	s, _ := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	e.wait(t, s.ID, domain.SessionActive)
	stop() // heartbeats stop: the host goes lost and its session dies
	s = e.wait(t, s.ID, domain.SessionDead)
	if !strings.Contains(s.Reason, hostID) {
		t.Fatalf("reason %q does not name the host", s.Reason)
	}
	h, _ := e.st.GetHost(context.Background(), hostID)
	if h.State != domain.HostLost {
		t.Fatalf("host state %s, want lost", h.State)
	}
	owned, err := e.co.owned(context.Background(), hostID)
	if err != nil || len(owned) != 0 {
		t.Fatalf("lost host still owns %v (%v)", owned, err)
	}
}

func TestDeleteSupersedesCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	// No host yet: the create op sits in placement; delete must win.
	s, _ := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	if _, err := e.co.DeleteSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	e.addHost(t, "a", 4)
	s = e.wait(t, s.ID, domain.SessionCompleted)
	// The op is finished just after its last transition lands.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ops, _ := e.st.ListOps(context.Background(), s.ID)
		kinds := map[domain.OpKind]domain.OpState{}
		for _, o := range ops {
			kinds[o.Kind] = o.State
		}
		if kinds[domain.OpDestroy] == domain.OpSucceeded && kinds[domain.OpCreate] == domain.OpSuperseded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ops %+v; want create superseded, destroy succeeded", kinds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRegisterAndHeartbeatReportOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	hostID, _ := e.addHost(t, "a", 4)
	s, _ := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.wait(t, s.ID, domain.SessionActive)
	if err := e.st.SetHostState(context.Background(), hostID, domain.HostLost); err != nil {
		t.Fatal(err)
	}
	body := `{"capacity":{"memory_mib":1024,"vcpus":4}}`
	req := httptest.NewRequest("POST", hostlink.PathHeartbeat, strings.NewReader(body))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	e.co.HostHandler().ServeHTTP(rec, req)
	var hb hostlink.HeartbeatResponse
	if err := json.NewDecoder(rec.Body).Decode(&hb); err != nil || rec.Code != 200 {
		t.Fatalf("heartbeat: %d %v", rec.Code, err)
	}
	if len(hb.Owned) != 1 || hb.Owned[0].SessionID != s.ID || hb.Owned[0].Epoch != s.Epoch {
		t.Fatalf("owned %+v, want %s@%d", hb.Owned, s.ID, s.Epoch)
	}
	if h, _ := e.st.GetHost(context.Background(), hostID); h.State != domain.HostReady {
		t.Fatalf("returning host is %s, want ready", h.State)
	}
}

// TestRegisterReportsCachedSnapshots: the snapshots a host caches count
// for placement from its registration, not only from its next heartbeat.
func TestRegisterReportsCachedSnapshots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	hostID, _ := e.addHost(t, "a", 4)
	body := `{"name":"a","capacity":{"memory_mib":1024,"vcpus":4},"snapshots":["snap-1","snap-2"]}`
	req := httptest.NewRequest("POST", hostlink.PathRegister, strings.NewReader(body))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	e.co.HostHandler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("register: %d %s", rec.Code, rec.Body)
	}
	h, err := e.st.GetHost(context.Background(), hostID)
	if err != nil {
		t.Fatal(err)
	}
	var capa hostlink.Capacity
	if err := json.Unmarshal(h.Capacity, &capa); err != nil || strings.Join(capa.CachedSnapshots, ",") != "snap-1,snap-2" {
		t.Fatalf("cached snapshots after register: %+v %v", capa.CachedSnapshots, err)
	}
}

func TestCapacityRefusalPlacesElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	_, a := e.addHost(t, "a", 8) // more free memory: chosen first, but refuses
	a.full = true
	bID, _ := e.addHost(t, "b", 2)
	s, _ := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.wait(t, s.ID, domain.SessionActive)
	if s.HostID != bID {
		t.Fatalf("active on %s, want %s after a's refusal", s.HostID, bID)
	}
}

func TestUnreachableHostIsRetriedNotFatal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	id, _ := e.addHost(t, "a", 4)
	e.fleet.mu.Lock()
	e.fleet.down[id] = 2 // the first two calls find no link
	e.fleet.mu.Unlock()
	s, _ := e.co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.wait(t, s.ID, domain.SessionActive)
	ops, _ := e.st.ListOps(context.Background(), s.ID)
	if len(ops) != 1 || ops[0].Attempts < 3 {
		t.Fatalf("ops %+v: want one create op claimed 3+ times", ops)
	}
}
