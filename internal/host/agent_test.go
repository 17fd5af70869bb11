package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
)

func TestMain(m *testing.M) {
	if os.Getenv(hostileChildEnv) != "" { // TestHostileGuests' host agent
		os.Exit(runHostileChild())
	}
	goleak.VerifyTestMain(m)
}

const wait = 10 * time.Second

// coord is a test coordinator built from hostlink.Server.
type coord struct {
	srvMu      sync.Mutex
	srv        *hostlink.Server
	deps       hostlink.ServerDeps
	mux        *http.ServeMux
	registers  chan hostlink.RegisterRequest
	heartbeats chan hostlink.HeartbeatRequest
	registerAt chan time.Time // when each request arrived
	beatAt     chan time.Time

	mu       sync.Mutex
	owned    []hostlink.Ownership
	interval time.Duration
	lease    time.Duration
	cut      chan struct{} // not nil: register and heartbeat hang until it is closed
}

func newCoord(interval time.Duration) *coord {
	c := &coord{
		registers:  make(chan hostlink.RegisterRequest, 1000),
		heartbeats: make(chan hostlink.HeartbeatRequest, 1000),
		registerAt: make(chan time.Time, 1000),
		beatAt:     make(chan time.Time, 1000),
		interval:   interval,
	}
	h := http.NewServeMux()
	h.HandleFunc("POST "+hostlink.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		var req hostlink.RegisterRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !c.wait(r) {
			return
		}
		id, _ := hostlink.HostIDFrom(r.Context())
		c.mu.Lock()
		resp := hostlink.RegisterResponse{HostID: string(id), Owned: c.owned, HeartbeatInterval: c.interval, Lease: c.lease}
		c.mu.Unlock()
		send(c.registers, req)
		send(c.registerAt, time.Now())
		_ = json.NewEncoder(w).Encode(resp)
	})
	h.HandleFunc("POST "+hostlink.PathHeartbeat, func(w http.ResponseWriter, r *http.Request) {
		var req hostlink.HeartbeatRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !c.wait(r) {
			return
		}
		c.mu.Lock()
		resp := hostlink.HeartbeatResponse{Owned: c.owned, Lease: c.lease}
		c.mu.Unlock()
		send(c.heartbeats, req)
		send(c.beatAt, time.Now())
		_ = json.NewEncoder(w).Encode(resp)
	})
	c.deps = hostlink.ServerDeps{
		Authenticate: func(_ context.Context, tok string) (hostlink.Credential, error) {
			if tok != "tok" {
				return hostlink.Credential{}, errors.New("unknown token")
			}
			return hostlink.Credential{HostID: "host-1"}, nil
		},
		Handler: h,
	}
	c.srv = hostlink.NewServer(hostlink.ServerConfig{}, c.deps)
	c.mux = http.NewServeMux()
	c.mux.HandleFunc(hostlink.PathConnect, func(w http.ResponseWriter, r *http.Request) { c.server().ServeHTTP(w, r) })
	// /proxy/... reaches the host's machine API over the link, as the
	// coordinator's API does for terminals.
	c.mux.HandleFunc("/proxy/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		rt, ok := c.server().Transport("host-1")
		if !ok {
			http.Error(w, "host not connected", http.StatusServiceUnavailable)
			return
		}
		rest := "/" + r.PathValue("rest")
		(&httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL.Path = rest; pr.Out.URL.RawPath = "" },
			Transport: rt,
		}).ServeHTTP(w, r)
	})
	return c
}

// send never blocks a handler on a test that stopped reading.
func send[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// wait holds a register or heartbeat while the coordinator is cut off.
func (c *coord) wait(r *http.Request) bool {
	c.mu.Lock()
	cut := c.cut
	c.mu.Unlock()
	if cut == nil {
		return true
	}
	select {
	case <-cut:
		return true
	case <-r.Context().Done():
		return false
	}
}

// partition makes registers and heartbeats hang (the link stays up);
// heal releases them.
func (c *coord) partition() (heal func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.cut = ch
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.cut = nil
		c.mu.Unlock()
		close(ch)
	}
}

func (c *coord) server() *hostlink.Server {
	c.srvMu.Lock()
	defer c.srvMu.Unlock()
	return c.srv
}

// restart replaces the coordinator's Server, dropping every link, as a
// coordinator replica restart does.
func (c *coord) restart() {
	c.srvMu.Lock()
	old := c.srv
	c.srv = hostlink.NewServer(hostlink.ServerConfig{}, c.deps)
	c.srvMu.Unlock()
	_ = old.Close()
}

func (c *coord) close() { _ = c.server().Close() }

func (c *coord) setOwned(o ...hostlink.Ownership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owned = o
}

// do sends a request to the host; epoch < 0 sends no epoch header.
func (c *coord) do(t *testing.T, method, path string, epoch int64, body any) (int, []byte) {
	t.Helper()
	rt, ok := c.server().Transport("host-1")
	if !ok {
		t.Fatal("host-1 not connected")
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://host"+path, rd)
	if epoch >= 0 {
		req.Header.Set(hostlink.HeaderEpoch, strconv.FormatInt(epoch, 10))
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *coord) start(t *testing.T, sid string, epoch int64, spec hostlink.MachineSpec) (int, []byte) {
	t.Helper()
	return c.do(t, http.MethodPut, "/v1/machines/"+sid, epoch, hostlink.StartRequest{Epoch: epoch, Spec: spec})
}

func wantCode(t *testing.T, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	var eb hostlink.ErrorBody
	_ = json.Unmarshal(body, &eb)
	if status != wantStatus || eb.Code != wantCode {
		t.Fatalf("got %d %s, want %d code %q", status, body, wantStatus, wantCode)
	}
}

func recv[T any](t *testing.T, ch <-chan T, match func(T) bool) T {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case v := <-ch:
			if match == nil || match(v) {
				return v
			}
		case <-timeout:
			var zero T
			t.Fatalf("timed out waiting for %T", zero)
			return zero
		}
	}
}

func waitDestroyed(t *testing.T, m *fakeMachine) {
	t.Helper()
	select {
	case <-m.destroyed:
	case <-time.After(wait):
		t.Fatalf("machine of %s not destroyed", m.spec.SessionID)
	}
}

func machineState(ms []hostlink.MachineStatus, sid string) string {
	for _, m := range ms {
		if m.SessionID == sid {
			return m.State
		}
	}
	return ""
}

// runAgent runs an agent against c's URL until the test ends or stop is
// called.
func runAgent(t *testing.T, url, dir string, w *world) (stop func()) {
	t.Helper()
	return runAgentWith(t, url, dir, w, nil)
}

// runAgentWith is runAgent with changes to the configuration.
func runAgentWith(t *testing.T, url, dir string, w *world, opt func(*host.Config, *host.Deps)) (stop func()) {
	t.Helper()
	cfg := host.Config{
		CoordinatorURL:    url,
		Token:             "tok",
		Name:              "test-host",
		DataDir:           dir,
		HeartbeatInterval: time.Hour,
		Capacity:          domain.Capacity{MemoryMiB: 4096, VCPUs: 4},
		AgentVersion:      "v0.0.1-test",
	}
	deps := host.Deps{Backend: fakeBackend{w}}
	if os.Getenv("HOST_TEST_LOG") != "" {
		deps.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opt != nil {
		opt(&cfg, &deps)
	}
	a, err := host.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func serve(t *testing.T, c *coord) string {
	t.Helper()
	s := httptest.NewServer(c.mux)
	t.Cleanup(func() {
		c.close()
		s.Close()
	})
	return s.URL
}

func TestRegisterStartAndFence(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	runAgent(t, serve(t, c), dir, w)

	checkRegistration(t, recv(t, c.registers, nil))
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1})

	spec := hostlink.MachineSpec{MemoryMiB: 1024, VCPUs: 2, Env: map[string]string{"A": "b"}}
	m := startFenced(t, c, w, dir, spec)
	refuseStaleOverCapacityAndBad(t, c, m, spec)

	// Heartbeats report the machine and capacity in use.
	hb := recv(t, c.heartbeats, func(hb hostlink.HeartbeatRequest) bool { return machineState(hb.Machines, "s1") == "running" })
	if hb.Capacity.UsedMemoryMiB != 1024 || hb.Capacity.UsedVCPUs != 2 || hb.Capacity.Sessions != 1 {
		t.Errorf("capacity = %+v", hb.Capacity)
	}
	status, body := c.do(t, http.MethodGet, hostlink.PathMachines, -1, nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"s1"`) {
		t.Errorf("list: %d %s", status, body)
	}

	// A machine that exits on its own is reported.
	m.exit()
	recv(t, c.heartbeats, func(hb hostlink.HeartbeatRequest) bool { return machineState(hb.Machines, "s1") == "exited" })

	deleteFenced(t, c, m, dir, spec)
}

// checkRegistration checks the agent registered its host's facts and full
// capacity, with no machines.
func checkRegistration(t *testing.T, reg hostlink.RegisterRequest) {
	t.Helper()
	if host, _ := os.Hostname(); reg.Facts.Hostname != host || reg.Facts.Arch != runtime.GOARCH ||
		reg.Facts.Backend.Name != "fake" || reg.Facts.AgentVersion != "v0.0.1-test" || reg.Facts.Kernel == "" || reg.Name != "test-host" {
		t.Errorf("facts = %+v", reg.Facts)
	}
	if reg.Capacity.MemoryMiB != 4096 || reg.Capacity.VCPUs != 4 || len(reg.Machines) != 0 {
		t.Errorf("register = %+v", reg)
	}
}

// startFenced starts session s1 at epoch 1 with spec, checks the start is
// idempotent and its epoch persisted before acting, and returns the machine.
func startFenced(t *testing.T, c *coord, w *world, dir string, spec hostlink.MachineSpec) *fakeMachine {
	t.Helper()
	status, body := c.start(t, "s1", 1, spec)
	var st hostlink.MachineStatus
	_ = json.Unmarshal(body, &st)
	if status != http.StatusOK || st.State != "running" || st.Epoch != 1 || st.SessionID != "s1" {
		t.Fatalf("start: %d %s", status, body)
	}
	m := w.machine(dir, "s1")
	if m == nil || m.spec.MemoryMiB != 1024 || m.spec.VCPUs != 2 || m.spec.Env["A"] != "b" || m.spec.Epoch != 1 {
		t.Fatalf("booted with %+v", m)
	}
	// Idempotent: the same epoch again answers with the running machine.
	if status, body := c.start(t, "s1", 1, spec); status != http.StatusOK || w.bootCount() != 1 {
		t.Fatalf("second start: %d %s, boots %d", status, body, w.bootCount())
	}
	// The epoch was persisted before acting.
	if b, err := os.ReadFile(filepath.Join(dir, "epochs", "s1")); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("epoch file: %q, %v", b, err)
	}
	return m
}

// refuseStaleOverCapacityAndBad checks that stale epochs change nothing,
// that starts over capacity are refused, and that bad input is.
func refuseStaleOverCapacityAndBad(t *testing.T, c *coord, m *fakeMachine, spec hostlink.MachineSpec) {
	t.Helper()
	// Stale epochs change nothing.
	status, body := c.start(t, "s1", 0, spec)
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
	status, body = c.do(t, http.MethodDelete, "/v1/machines/s1", 0, nil)
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
	if m.isDestroyed() {
		t.Fatal("stale delete destroyed the machine")
	}
	// Over capacity: 1024 of 4096 MiB in use.
	status, body = c.start(t, "s2", 1, hostlink.MachineSpec{MemoryMiB: 3500, VCPUs: 1})
	wantCode(t, status, body, http.StatusConflict, "capacity")
	// vCPUs: 4 CPUs offer 4 × VCPUOvercommit, 2 are in use.
	status, body = c.start(t, "s2", 1, hostlink.MachineSpec{MemoryMiB: 512, VCPUs: 4*domain.VCPUOvercommit - 1})
	wantCode(t, status, body, http.StatusConflict, "capacity")
	// Bad input.
	status, body = c.start(t, "a%24b", 1, spec)
	wantCode(t, status, body, http.StatusBadRequest, "bad_request")
	status, body = c.do(t, http.MethodDelete, "/v1/machines/s1", -1, nil)
	wantCode(t, status, body, http.StatusBadRequest, "bad_request")
}

// deleteFenced deletes s1 at epoch 2, twice: delete is idempotent, the
// higher epoch is recorded so a start at epoch 1 is stale, and the machine
// and its directory are gone.
func deleteFenced(t *testing.T, c *coord, m *fakeMachine, dir string, spec hostlink.MachineSpec) {
	t.Helper()
	if status, body := c.do(t, http.MethodDelete, "/v1/machines/s1", 2, nil); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, body := c.do(t, http.MethodDelete, "/v1/machines/s1", 2, nil); status != http.StatusNoContent {
		t.Fatalf("second delete: %d %s", status, body)
	}
	status, body := c.start(t, "s1", 1, spec)
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
	if !m.isDestroyed() {
		t.Error("delete did not destroy the machine")
	}
	if _, err := os.Stat(filepath.Join(dir, "machines", "s1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("machine dir left behind: %v", err)
	}
}

func TestReconcileOwnership(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	runAgent(t, serve(t, c), dir, w)
	recv(t, c.registers, nil)

	c.setOwned(hostlink.Ownership{SessionID: "keep", Epoch: 3}, hostlink.Ownership{SessionID: "claimed", Epoch: 5})
	for _, s := range []struct {
		sid   string
		epoch int64
	}{{"keep", 3}, {"claimed", 4}, {"gone", 1}, {"gone-newer", 7}} {
		if status, body := c.start(t, s.sid, s.epoch, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", s.sid, status, body)
		}
	}
	// "gone" and "gone-newer" are not owned, whatever their epoch;
	// "claimed" is owned at a higher epoch than it runs (an op claim bumped
	// it): kept, at the owned epoch.
	waitDestroyed(t, w.machine(dir, "gone"))
	waitDestroyed(t, w.machine(dir, "gone-newer"))
	hb := recv(t, c.heartbeats, func(hb hostlink.HeartbeatRequest) bool {
		return len(hb.Machines) == 2 && slices.ContainsFunc(hb.Machines, func(m hostlink.MachineStatus) bool {
			return m.SessionID == "claimed" && m.Epoch == 5
		})
	})
	for _, m := range hb.Machines {
		if want := map[string]int64{"keep": 3, "claimed": 5}[m.SessionID]; m.Epoch != want || m.State != "running" {
			t.Errorf("machine %+v, want epoch %d running", m, want)
		}
	}
	for sid, destroyed := range map[string]bool{"keep": false, "claimed": false, "gone": true, "gone-newer": true} {
		if got := w.machine(dir, sid).isDestroyed(); got != destroyed {
			t.Errorf("%s destroyed = %v, want %v", sid, got, destroyed)
		}
	}
	// The owned epoch was recorded: the old op can no longer act, the new
	// one can.
	status, body := c.start(t, "claimed", 4, hostlink.MachineSpec{})
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
	if b, err := os.ReadFile(filepath.Join(dir, "epochs", "claimed")); err != nil || strings.TrimSpace(string(b)) != "5" {
		t.Errorf("epoch file: %q, %v", b, err)
	}
	if status, body := c.do(t, http.MethodGet, "/v1/machines/claimed/guest"+guestapi.PathReady, 5, nil); status != http.StatusOK {
		t.Errorf("guest at the owned epoch: %d %s", status, body)
	}
	if w.bootCount() != 4 {
		t.Errorf("%d boots, want 4", w.bootCount())
	}
}

func TestRestartRecoversMachines(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	url := serve(t, c)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	stop := runAgent(t, url, dir, w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "alive", Epoch: 2}, hostlink.Ownership{SessionID: "died", Epoch: 1},
		hostlink.Ownership{SessionID: "disowned", Epoch: 1})
	for _, sid := range []string{"alive", "died", "disowned"} {
		epoch := int64(1)
		if sid == "alive" {
			epoch = 2
		}
		if status, body := c.start(t, sid, epoch, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	stop()
	snap := filepath.Join(dir, "machines", "died", "snapshots", "snap-1")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	w.machine(dir, "died").exit() // died while no agent watched
	c.setOwned(hostlink.Ownership{SessionID: "alive", Epoch: 2})

	runAgent(t, url, dir, w)
	reg := recv(t, c.registers, nil)
	if len(reg.Machines) != 2 || machineState(reg.Machines, "alive") != "running" || machineState(reg.Machines, "disowned") != "running" {
		t.Fatalf("registered machines = %+v", reg.Machines)
	}
	for _, m := range reg.Machines {
		if m.SessionID == "alive" && m.Epoch != 2 {
			t.Errorf("alive recovered at epoch %d", m.Epoch)
		}
	}
	// Gone: forgotten, its dir removed except the snapshots.
	if _, err := os.Stat(snap); err != nil {
		t.Errorf("snapshot removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "machines", "died", "engrams-agent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of a gone machine kept: %v", err)
	}
	// Not owned any more: destroyed on register, never resurrected.
	waitDestroyed(t, w.machine(dir, "disowned"))
	if w.machine(dir, "alive").isDestroyed() {
		t.Error("reconcile after restart destroyed the wrong machines")
	}
	// The recovered machine still answers through the guest proxy.
	if status, body := c.do(t, http.MethodGet, "/v1/machines/alive/guest"+guestapi.PathReady, 2, nil); status != http.StatusOK || !strings.Contains(string(body), "alive") {
		t.Errorf("guest of recovered machine: %d %s", status, body)
	}
	// Epochs survived the restart.
	status, body := c.start(t, "alive", 1, hostlink.MachineSpec{})
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
}

func TestGuestProxy(t *testing.T) {
	t.Parallel()
	c := newCoord(time.Hour)
	url := serve(t, c)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	runAgent(t, url, t.TempDir(), w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 4})
	if status, body := c.start(t, "s1", 4, hostlink.MachineSpec{}); status != http.StatusOK {
		t.Fatalf("start: %d %s", status, body)
	}

	before := time.Now()
	status, body := c.do(t, http.MethodGet, "/v1/machines/s1/guest"+guestapi.PathReady+"?boot=7", 4, nil)
	var ready guestapi.Ready
	_ = json.Unmarshal(body, &ready)
	if status != http.StatusOK || ready.Hostname != "s1" || ready.BootID != "boot=7" {
		t.Fatalf("ready: %d %s", status, body)
	}
	// The request counts as the session's activity.
	var ms []hostlink.MachineStatus
	status, body = c.do(t, http.MethodGet, hostlink.PathMachines, -1, nil)
	if err := json.Unmarshal(body, &ms); err != nil || status != http.StatusOK || len(ms) != 1 || ms[0].LastActivity.Before(before) {
		t.Fatalf("machines after a guest request: %d %s (sent at %v)", status, body, before)
	}
	status, body = c.do(t, http.MethodGet, "/v1/machines/s1/guest"+guestapi.PathReady, 3, nil)
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
	status, body = c.do(t, http.MethodGet, "/v1/machines/s1/guest"+guestapi.PathReady, -1, nil)
	wantCode(t, status, body, http.StatusBadRequest, "bad_request")
	status, body = c.do(t, http.MethodGet, "/v1/machines/nope/guest"+guestapi.PathReady, 1, nil)
	wantCode(t, status, body, http.StatusNotFound, "not_found")

	// A WebSocket from a coordinator client, over the link, to the guest.
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	hdr := http.Header{}
	hdr.Set(hostlink.HeaderEpoch, "4")
	ws, _, err := websocket.Dial(ctx, url+"/proxy/v1/machines/s1/guest"+guestapi.PathExec, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	defer ws.CloseNow()
	for i := range 3 {
		msg := fmt.Sprintf("echo %d", i)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.Read(ctx); err != nil || string(b) != "s1:"+msg {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
}

// TestHeartbeatEveryInterval runs in real time: yamux keeps timers in a
// process-wide sync.Pool, so a link inside a synctest bubble crashes other
// tests ("reset of synctest timer from outside bubble").
func TestHeartbeatEveryInterval(t *testing.T) {
	t.Parallel()
	const interval = 30 * time.Millisecond
	c := newCoord(interval) // the coordinator's interval wins over Config's hour
	w := newWorld()
	t.Cleanup(w.destroyAll)
	runAgent(t, serve(t, c), t.TempDir(), w)

	registered := recv(t, c.registerAt, nil)
	for k := 1; k <= 3; k++ {
		at := recv(t, c.beatAt, nil)
		if early := registered.Add(time.Duration(k) * interval).Sub(at); early > 0 {
			t.Errorf("heartbeat %d came %v early", k, early)
		}
	}
	// The link drops: the agent redials and registers again.
	c.restart()
	recv(t, c.registers, nil)
	recv(t, c.heartbeats, nil)
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// A second agent on a data dir another agent runs on refuses to start,
// naming the holder, and never touches the first one's machines; once the
// first has stopped, one starts.
func TestSecondAgentOnDataDirRefused(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	url := serve(t, c)
	stop := runAgent(t, url, dir, w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1})
	m := startFenced(t, c, w, dir, hostlink.MachineSpec{MemoryMiB: 1024, VCPUs: 2, Env: map[string]string{"A": "b"}})

	second, err := host.New(host.Config{CoordinatorURL: url, Token: "tok", DataDir: dir,
		Capacity: domain.Capacity{MemoryMiB: 4096, VCPUs: 4}}, host.Deps{Backend: fakeBackend{w}})
	if err != nil {
		t.Fatal(err)
	}
	// Without the lock it would run (and adopt s1) until this ends.
	runCtx, cancelRun := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelRun()
	err = second.Run(runCtx)
	if !errors.Is(err, hostfs.ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second agent on the same data dir: %v, want in use by pid %d", err, os.Getpid())
	}
	if m.isPaused() || m.isDestroyed() {
		t.Fatal("the refused agent touched the first one's machine")
	}
	status, body := c.do(t, http.MethodGet, hostlink.PathMachines, -1, nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"s1"`) {
		t.Errorf("first agent after the refusal: %d %s", status, body)
	}

	stop()
	// Once the first has stopped, a third starts, its data dir taken by
	// its caller before anything else opened it (as cmd/engrams does).
	lock, err := host.LockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after the first stopped: %v", err)
	}
	defer lock.Close()
	if _, err := host.LockDataDir(dir); !errors.Is(err, hostfs.ErrInUse) {
		t.Fatalf("lock while the caller holds it: %v, want ErrInUse", err)
	}
	third, err := host.New(host.Config{CoordinatorURL: url, Token: "tok", DataDir: dir,
		Capacity: domain.Capacity{MemoryMiB: 4096, VCPUs: 4}}, host.Deps{Backend: fakeBackend{w}, DataDirLock: lock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- third.Run(ctx) }()
	recv(t, c.registers, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent after the first stopped: %v", err)
	}
}
