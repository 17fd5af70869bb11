package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// crashCase is one way an agent died after a suspend's files were
// complete on disk, before the coordinator had its answer.
type crashCase struct {
	name       string
	vmmGone    bool // the VMM died with the agent
	holdExpiry bool // the retry comes after the hold: the machine runs again and is captured afresh
}

// TestRestartFinishesACompleteLocalSnapshot: an agent dies once a
// suspend's files are complete on its disk (the upload had not finished).
// The restarted agent keeps the paused machine paused, and the
// coordinator's retried capture (same snapshot id, newer epoch) gets the
// snapshot the files hold, uploaded now: the state the guest had when
// the suspend began, with the outbox seq it had applied. The machine is
// never snapshotted twice nor resumed in between. With the VMM gone too
// the files still answer. A retry that comes after the hold finds the
// machine running again and captures it afresh.
func TestRestartFinishesACompleteLocalSnapshot(t *testing.T) {
	t.Parallel()
	for _, tt := range []crashCase{
		{name: "paused machine adopted"},
		{name: "machine gone", vmmGone: true},
		{name: "retry after the hold", holdExpiry: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testCrashAfterSnapshotWritten(t, tt)
		})
	}
}

// frozenClock is time.Now plus an offset the test moves.
type frozenClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *frozenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *frozenClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// crashAfterSnapshotWritten runs an agent whose suspend of s1 (snapshot
// snap-2, one outbox item applied) "dies" once its files are complete on
// disk, and leaves those files and the machine (paused, or gone with
// vmmGone) as the crash would.
func crashAfterSnapshotWritten(t *testing.T, vmmGone bool) (*snapEnv, *fakeMachine) {
	t.Helper()
	c, w, ch, dir := newCoord(20*time.Millisecond), newWorld(), newChunks(t, false), t.TempDir()
	t.Cleanup(w.destroyAll)
	url := serve(t, c)
	files := filepath.Join(dir, "machines", "s1", "snapshot-snap-2")
	aside := filepath.Join(t.TempDir(), "aside")
	// The first agent "dies" right after the files are complete: the
	// checkpoint moves them aside (what a crash would leave on disk), so
	// this agent's upload fails and it resumes the machine as it would.
	crash := func(_ context.Context, point string) {
		if point == "snapshot-written" {
			if err := os.Rename(files, aside); err != nil {
				t.Errorf("move the capture aside: %v", err)
			}
		}
	}
	stop := runAgentWith(t, url, dir, w, func(cfg *host.Config, d *host.Deps) { ch.wire(cfg, d); d.Checkpoint = crash })
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1})
	if status, body := c.start(t, "s1", 1, hostlink.MachineSpec{MemoryMiB: 256}); status != http.StatusOK {
		t.Fatalf("start: %d %s", status, body)
	}
	e := &snapEnv{c: c, url: url, w: w, ch: ch, dir: dir}
	if status, body, applied := e.deliver(t, 1, 1); status != http.StatusOK || applied != 1 {
		t.Fatalf("deliver: %d %s", status, body)
	}
	if status, body, _ := e.snapshot(t, 1, "snap-2", true); status == http.StatusOK {
		t.Fatalf("the first attempt should have failed with its files gone: %s", body)
	}
	stop()
	m := w.machine(dir, "s1")
	m.setPaused(true) // as the VMM was when the agent died
	if vmmGone {
		_ = m.Destroy(context.Background())
	}
	if err := os.Rename(aside, files); err != nil {
		t.Fatal(err)
	}
	return e, m
}

func testCrashAfterSnapshotWritten(t *testing.T, tt crashCase) {
	e, m := crashAfterSnapshotWritten(t, tt.vmmGone)
	c, w, ch, dir, url := e.c, e.w, e.ch, e.dir, e.url
	snaps, resumes := m.counts()

	clk := &frozenClock{}
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 2}) // the op was claimed again
	runAgentWith(t, url, dir, w, func(cfg *host.Config, d *host.Deps) { ch.wire(cfg, d); d.Now = clk.Now })
	reg := recv(t, c.registers, nil)
	wantState := "paused"
	if tt.vmmGone {
		wantState = ""
	}
	if got := machineState(reg.Machines, "s1"); got != wantState {
		t.Fatalf("registered s1 as %q, want %q", got, wantState)
	}
	for range 3 { // reconcile ran: the machine stays paused for the retry
		recv(t, c.heartbeats, nil)
	}
	if tt.holdExpiry {
		clk.advance(3 * time.Minute)
		eventually(t, "the hold expires and the machine runs again", func() bool { return !m.isPaused() })
		if left := snapshotFiles(t, dir); len(left) != 0 {
			t.Fatalf("the capture outlived the resume: %v", left)
		}
	} else if _, r := m.counts(); !tt.vmmGone && (!m.isPaused() || r != resumes) {
		t.Fatalf("machine resumed before the retried capture (paused %v, resumes %d, was %d)", m.isPaused(), r, resumes)
	}

	status, body, resp := e.snapshot(t, 2, "snap-2", true)
	if status != http.StatusOK || resp.SnapshotID != "snap-2" || resp.OutboxSeq != 1 {
		t.Fatalf("retried capture: %d %s", status, body)
	}
	s, _ := m.counts()
	if again := s - snaps; again != map[bool]int{false: 0, true: 1}[tt.holdExpiry] {
		t.Fatalf("the retried capture snapshotted the machine %d more times", again)
	}
	if !tt.vmmGone {
		waitDestroyed(t, m)
	}
	if left := snapshotFiles(t, dir); len(left) != 0 {
		t.Fatalf("local snapshot files left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "machines", "s1")); !os.IsNotExist(err) {
		t.Fatalf("machine dir left after the capture destroyed it: %v", err)
	}
	checkRestored(t, e, resp.Manifests)
}

// checkRestored restores manifests into s1 and checks it holds what the
// guest had applied when the suspend began.
func checkRestored(t *testing.T, e *snapEnv, manifests json.RawMessage) {
	t.Helper()
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 3})
	if status, body := e.restore(t, 3, "snap-2", manifests); status != http.StatusOK {
		t.Fatalf("restore: %d %s", status, body)
	}
	applied, journal, _, _ := e.w.machine(e.dir, "s1").state()
	if applied != 1 || journal != "item-1" {
		t.Fatalf("restored state applied %d %q, want the item delivered before the suspend", applied, journal)
	}
}

// TestRestartReapsStrayVMMs: VMMs of this agent's that no machine record
// adopts (a spawn the previous agent did not live to record, an older
// spawn beside the recorded one) are reaped at start; adopted machines
// and machines tracked as lost keep theirs.
func TestRestartReapsStrayVMMs(t *testing.T) {
	t.Parallel()
	c, w, dir := newCoord(20*time.Millisecond), newWorld(), t.TempDir()
	t.Cleanup(w.destroyAll)
	url := serve(t, c)
	stop := runAgent(t, url, dir, w)
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "live", Epoch: 1}, hostlink.Ownership{SessionID: "stuck", Epoch: 1})
	for _, sid := range []string{"live", "stuck"} {
		if status, body := c.start(t, sid, 1, hostlink.MachineSpec{}); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	stop()
	mdir := func(sid string) string { return filepath.Join(dir, "machines", sid) }
	ghost := vmm.VMM{Dir: mdir("ghost"), Processes: []vmm.Process{{PID: 77}}} // no record at all
	older := vmm.VMM{Dir: mdir("live"), Processes: []vmm.Process{{PID: 78}}}  // beside the recorded one
	capture := vmm.VMM{Dir: filepath.Join(dir, "image-captures", "j1"), Processes: []vmm.Process{{PID: 79}}}
	if err := os.MkdirAll(mdir("ghost"), 0o700); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *world) {
		w.strays = []vmm.VMM{ghost, older, capture}
		w.recoverFail[mdir("stuck")] = 99 // cannot be reattached for now
	})
	runAgent(t, url, dir, w)
	recv(t, c.registers, nil)
	var reaped []string
	w.set(func(w *world) {
		for _, v := range w.reaped {
			reaped = append(reaped, v.Dir)
		}
	})
	slices.Sort(reaped)
	want := []string{capture.Dir, ghost.Dir, older.Dir}
	slices.Sort(want)
	if !slices.Equal(reaped, want) {
		t.Fatalf("reaped %v, want %v", reaped, want)
	}
	if w.machine(dir, "live").isDestroyed() || w.machine(dir, "stuck").isDestroyed() {
		t.Fatal("reaped an adopted machine or one tracked as lost")
	}
	if _, err := os.Stat(mdir("ghost")); !os.IsNotExist(err) {
		t.Fatalf("the dir of a reaped stray was kept: %v", err)
	}
}

// eventually polls cond (the agent acts on its own heartbeats).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
