package host

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

type stubMachine struct {
	mu              sync.Mutex
	paused          bool
	pauses, resumes int
	destroyed       bool
	done            chan struct{}
	pauseErr        error
}

func (s *stubMachine) Info() vmm.Info { return vmm.Info{PID: 7} }
func (s *stubMachine) Dial(context.Context) (net.Conn, error) {
	return nil, errors.New("no guest")
}
func (s *stubMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}
func (s *stubMachine) Pause(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pauseErr != nil {
		return s.pauseErr
	}
	s.paused = true
	s.pauses++
	return nil
}
func (s *stubMachine) Resume(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	s.resumes++
	return nil
}
func (s *stubMachine) Destroy(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destroyed = true
	return nil
}
func (s *stubMachine) Done() <-chan struct{} { return s.done }

func (s *stubMachine) counts() (paused bool, pauses, resumes int, destroyed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused, s.pauses, s.resumes, s.destroyed
}

type stubBackend struct{}

func (stubBackend) Capabilities() vmm.Capabilities { return vmm.Capabilities{Name: "stub"} }
func (stubBackend) Boot(context.Context, vmm.Spec) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}
func (stubBackend) Restore(context.Context, vmm.Spec, vmm.Snapshot) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}
func (stubBackend) Recover(context.Context, string) (vmm.Machine, error) { return nil, vmm.ErrGone }

// runRegistry runs a's registry (its exit watchers) until the test ends.
func runRegistry(t *testing.T, a *Agent) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.reg.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestLeaseFakeClock drives the lease decisions with a fake clock: when a
// machine pauses, which answers resume it, what the pause cancels.
func TestLeaseFakeClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	at := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = t0.Add(d)
	}
	a, err := New(Config{CoordinatorURL: "http://c", Token: "t", DataDir: t.TempDir(), Capacity: domain.Capacity{MemoryMiB: 1024, VCPUs: 2}},
		Deps{Backend: stubBackend{}, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, a)
	owned := []hostlink.Ownership{{SessionID: "s1", Epoch: 1}}
	keep := &stubMachine{done: make(chan struct{})}
	mc := a.life.publish("s1", 1, hostlink.MachineSpec{MemoryMiB: 256, VCPUs: 1}, keep)
	ctx := t.Context()

	a.lease.renew(t0, 10*time.Second)
	op, cancel := a.lease.OpContext(ctx)
	defer cancel()
	at(4 * time.Second)
	if wait := a.lease.check(ctx, a.life.pauseAll); wait != 6*time.Second {
		t.Errorf("next look in %v, want 6s", wait)
	}
	if p, _, _, _ := keep.counts(); p || op.Err() != nil {
		t.Fatalf("paused %v, op %v within the lease", p, op.Err())
	}
	at(10 * time.Second) // the lease runs out
	a.lease.check(ctx, a.life.pauseAll)
	select { // context.AfterFunc cancels from its own goroutine
	case <-op.Done():
	case <-time.After(10 * time.Second):
	}
	if p, _, _, _ := keep.counts(); !p || !mcPaused(mc) || !errors.Is(context.Cause(op), errLeaseExpired) {
		t.Fatalf("after the lease: paused %v/%v, op cause %v", p, mcPaused(mc), context.Cause(op))
	}
	if _, ms := a.reg.State(); ms[0].State != "paused" {
		t.Errorf("reported %+v", ms[0])
	}
	// A late answer to a heartbeat sent long ago does not resume.
	at(10500 * time.Millisecond)
	a.lease.renew(t0.Add(200*time.Millisecond), 10*time.Second)
	a.life.reconcile(ctx, owned, a.reg.Generation())
	if p, _, r, _ := keep.counts(); !p || r != 0 {
		t.Fatalf("stale answer resumed the machine: paused %v resumes %d", p, r)
	}
	// A fresh answer listing it as owned resumes it, and new operations run.
	a.lease.renew(t0.Add(10500*time.Millisecond), 10*time.Second)
	a.life.reconcile(ctx, owned, a.reg.Generation())
	if p, _, r, _ := keep.counts(); p || r != 1 || mcPaused(mc) {
		t.Fatalf("after a fresh answer: paused %v resumes %d", p, r)
	}
	op2, cancel2 := a.lease.OpContext(ctx)
	defer cancel2()
	if op2.Err() != nil {
		t.Errorf("operation after renewal: %v", op2.Err())
	}
	// Expired again, then answered without it: destroyed, never resumed.
	at(30 * time.Second)
	a.lease.check(ctx, a.life.pauseAll)
	a.lease.renew(t0.Add(30*time.Second), 10*time.Second)
	a.life.reconcile(ctx, nil, a.reg.Generation())
	if _, pauses, r, d := keep.counts(); pauses != 2 || r != 1 || !d {
		t.Fatalf("unowned after expiry: pauses %d resumes %d destroyed %v", pauses, r, d)
	}
}

// TestLeaseUnpausableMachineIsDestroyed: a machine that cannot be paused
// must still stop writing.
func TestLeaseUnpausableMachineIsDestroyed(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a, err := New(Config{CoordinatorURL: "http://c", Token: "t", DataDir: t.TempDir(), Capacity: domain.Capacity{MemoryMiB: 1024, VCPUs: 2}},
		Deps{Backend: stubBackend{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, a)
	m := &stubMachine{done: make(chan struct{}), pauseErr: vmm.ErrUnsupported}
	a.life.publish("s1", 1, hostlink.MachineSpec{}, m)
	a.lease.renew(now.Add(-time.Minute), 10*time.Second)
	a.lease.check(t.Context(), a.life.pauseAll)
	if _, _, _, d := m.counts(); !d {
		t.Fatal("unpausable machine left running after the lease")
	}
	if _, ms := a.reg.State(); ms[0].State != "exited" {
		t.Errorf("reported %+v", ms[0])
	}
}

func mcPaused(mc *machines.Machine) bool {
	_, _, paused := mc.State()
	return paused
}
