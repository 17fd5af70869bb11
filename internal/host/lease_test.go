package host_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
)

// waitFor polls cond (state owned by other goroutines of the agent).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func listStates(t *testing.T, c *coord) map[string]string {
	t.Helper()
	status, body := c.do(t, http.MethodGet, hostlink.PathMachines, -1, nil)
	var ms []hostlink.MachineStatus
	if err := json.Unmarshal(body, &ms); err != nil || status != http.StatusOK {
		t.Fatalf("list machines: %d %s", status, body)
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.SessionID] = m.State
	}
	return out
}

// TestLeaseExpiryPausesAndOwnershipResumes runs in real time: the link
// (yamux) cannot live in a synctest bubble. TestLeaseFakeClock covers the
// same decisions deterministically.
func TestLeaseExpiryPausesAndOwnershipResumes(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	c := newCoord(20 * time.Millisecond)
	c.lease = lease
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	runAgent(t, serve(t, c), dir, w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "keep", Epoch: 1}, hostlink.Ownership{SessionID: "drop", Epoch: 1})
	for _, sid := range []string{"keep", "drop"} {
		if status, body := c.start(t, sid, 1, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	keep, drop := w.machine(dir, "keep"), w.machine(dir, "drop")

	// Heartbeats stop being answered; the link itself stays up.
	cutAt := time.Now()
	heal := c.partition()
	waitFor(t, "both machines paused", func() bool { return keep.isPaused() && drop.isPaused() })
	// The lease runs from the last answered heartbeat's sending, before
	// the cut: the host stops no later than the lease after the cut.
	if d := time.Since(cutAt); d > lease+time.Second {
		t.Errorf("paused %v after the cut, lease %v", d, lease)
	}
	if got := listStates(t, c); got["keep"] != "paused" || got["drop"] != "paused" {
		t.Errorf("states while cut off = %v", got)
	}
	// A paused host serves nothing that writes to a session.
	status, body := c.do(t, http.MethodGet, "/v1/machines/keep/guest/v1/ready", 1, nil)
	wantCode(t, status, body, http.StatusServiceUnavailable, "paused")
	status, body = c.do(t, http.MethodPost, "/v1/machines/keep/outbox", 1, hostlink.OutboxDelivery{Epoch: 1})
	wantCode(t, status, body, http.StatusServiceUnavailable, "paused")
	status, body = c.start(t, "new", 1, hostlink.MachineSpec{})
	wantCode(t, status, body, http.StatusServiceUnavailable, "paused")
	if b, err := os.ReadFile(filepath.Join(dir, "machines", "keep", "engrams-agent.json")); err != nil || !json.Valid(b) ||
		!jsonHas(b, "paused") {
		t.Errorf("pause not recorded: %s, %v", b, err)
	}

	// The coordinator answers again, and only "keep" is still owned.
	c.setOwned(hostlink.Ownership{SessionID: "keep", Epoch: 1})
	heal()
	waitDestroyed(t, drop)
	waitFor(t, "keep resumed", func() bool { return !keep.isPaused() })
	recv(t, c.heartbeats, func(hb hostlink.HeartbeatRequest) bool {
		return len(hb.Machines) == 1 && machineState(hb.Machines, "keep") == "running"
	})
	// The answer to that heartbeat may still be on its way: the guest
	// answers once it has renewed the lease.
	waitFor(t, "the guest answers again", func() bool {
		status, _ := c.do(t, http.MethodGet, "/v1/machines/keep/guest/v1/ready", 1, nil)
		return status == http.StatusOK
	})
	if keep.isDestroyed() {
		t.Error("owned machine destroyed")
	}
}

func jsonHas(b []byte, key string) bool {
	var m map[string]any
	return json.Unmarshal(b, &m) == nil && m[key] == true
}

func TestRecoverRetriesThenTracksLostMachine(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	url := serve(t, c)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	stop := runAgent(t, url, dir, w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "flaky", Epoch: 1}, hostlink.Ownership{SessionID: "stuck", Epoch: 2})
	for sid, epoch := range map[string]int64{"flaky": 1, "stuck": 2} {
		if status, body := c.start(t, sid, epoch, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	stop()
	w.set(func(w *world) {
		w.recoverFail[filepath.Join(dir, "machines", "flaky")] = 2  // then it reattaches
		w.recoverFail[filepath.Join(dir, "machines", "stuck")] = 99 // never, for now
	})
	c.setOwned(hostlink.Ownership{SessionID: "flaky", Epoch: 1})
	runAgent(t, url, dir, w)
	reg := recv(t, c.registers, nil)
	if got := map[string]string{"flaky": machineState(reg.Machines, "flaky"), "stuck": machineState(reg.Machines, "stuck")}; got["flaky"] != "running" || got["stuck"] != "exited" {
		t.Fatalf("registered machines = %+v", reg.Machines)
	}
	// Not owned: reconcile keeps trying to destroy it; once the backend
	// reattaches, the machine is destroyed and forgotten.
	stuck := w.machine(dir, "stuck")
	time.Sleep(100 * time.Millisecond)
	if stuck.isDestroyed() {
		t.Fatal("destroyed without reattaching")
	}
	w.set(func(w *world) { w.recoverFail[filepath.Join(dir, "machines", "stuck")] = 0 })
	waitDestroyed(t, stuck)
	recv(t, c.heartbeats, func(hb hostlink.HeartbeatRequest) bool {
		return len(hb.Machines) == 1 && machineState(hb.Machines, "flaky") == "running"
	})
}

// clock is a fake time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestEpochRecordsPrunedAfterRetention(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	clk := &clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	runAgentWith(t, serve(t, c), dir, w, func(cfg *host.Config, d *host.Deps) {
		cfg.EpochRetention = 24 * time.Hour
		d.Now = clk.Now
	})
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "owned", Epoch: 4})
	for sid, epoch := range map[string]int64{"owned": 4, "done": 3} {
		if status, body := c.start(t, sid, epoch, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	if status, body := c.do(t, http.MethodDelete, "/v1/machines/done", 3, nil); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	recv(t, c.heartbeats, nil)
	clk.advance(23 * time.Hour) // within the grace: kept
	recv(t, c.heartbeats, nil)
	recv(t, c.heartbeats, nil)
	if _, err := os.Stat(filepath.Join(dir, "epochs", "done")); err != nil {
		t.Fatalf("record pruned within the grace: %v", err)
	}
	clk.advance(2 * time.Hour)
	waitFor(t, "the record of done is pruned", func() bool {
		_, err := os.Stat(filepath.Join(dir, "epochs", "done"))
		return os.IsNotExist(err)
	})
	if _, err := os.Stat(filepath.Join(dir, "epochs", "owned")); err != nil {
		t.Errorf("record of an owned session pruned: %v", err)
	}
	status, body := c.start(t, "owned", 3, hostlink.MachineSpec{})
	wantCode(t, status, body, http.StatusConflict, "stale_epoch")
}
