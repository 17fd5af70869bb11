package host

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/relay"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

const (
	defaultMemoryMiB = 512
	defaultVCPUs     = 1
)

// EnvSessionID names the session to the processes in its guest.
const EnvSessionID = "ENGRAMS_SESSION_ID"

// hooks are the per-machine helpers the lifecycle calls (relay.Relay: the
// harness event relay, the gateway tunnels, the harness readiness check).
// Published is called just before a machine enters the table, Ready before
// a started one is answered as running, Stopped once a destroyed one has
// left the table.
type hooks interface {
	Published(mc *machines.Machine)
	Ready(ctx context.Context, mc *machines.Machine) error
	Stopped(mc *machines.Machine)
	// EgressReporter is the sink of sid's machine's egress events.
	EgressReporter(sid string) *relay.EgressReporter
}

// lifecycle runs the machines of sessions through the backend: start
// (boot or restore), adopt, pause and resume for the lease, snapshot,
// destroy, reconcile with the coordinator and recover after a restart.
// Every operation on a session holds its registry lock.
type lifecycle struct {
	log     *slog.Logger
	now     func() time.Time
	backend vmm.Backend
	facts   func() domain.HostFacts
	reg     *machines.Registry
	snaps   *snapshots.Snapshots
	lease   *lease
	hooks   hooks
	// checkpoint marks named points for fault tests (Deps.Checkpoint).
	checkpoint func(ctx context.Context, point string)
	network    NetworkFunc // Deps.Network; nil: no machine gets a network
	// dialBroker hands a guest's TLS to a brokered host to the
	// coordinator (NetworkDeps.DialBroker).
	dialBroker func(ctx context.Context, sid, hostPort string) (net.Conn, error)
}

// startCommand serves a start request: it boots or restores sid's
// machine, or answers with the one running.
func (l *lifecycle) startCommand(ctx context.Context, sid string, req hostlink.StartRequest) (hostlink.MachineStatus, error) {
	spec := req.Spec
	if spec.MemoryMiB <= 0 {
		spec.MemoryMiB = defaultMemoryMiB
	}
	if spec.VCPUs <= 0 {
		spec.VCPUs = defaultVCPUs
	}
	unlock := l.reg.Lock(sid)
	defer unlock()
	return l.start(ctx, sid, req.Epoch, spec, req.Restore, req.Harness)
}

// start boots or restores sid's machine, or answers with the one running.
// Callers hold the session lock.
func (l *lifecycle) start(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, restore *hostlink.RestoreSpec, harness json.RawMessage) (hostlink.MachineStatus, error) {
	log := l.log.With("session_id", sid, "epoch", epoch)
	if err := l.reg.Fence(sid, epoch); err != nil {
		return hostlink.MachineStatus{}, err
	}
	l.snaps.ForgetAnswer(sid) // the coordinator is past that capture
	if l.lease.Expired() {
		return hostlink.MachineStatus{}, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused, l.lease.Err())
	}
	if st, ok, err := l.adoptRunning(ctx, sid, epoch); ok || err != nil {
		return st, err
	}
	if err := snapshots.DropLocal(l.reg.Dir(sid)); err != nil { // a capture kept for a gone machine: the coordinator is past it
		return hostlink.MachineStatus{}, fmt.Errorf("start session %s: %w", sid, err)
	}
	if (restore != nil || len(harness) > 0) && !l.snaps.Supported() {
		return hostlink.MachineStatus{}, failure.New(http.StatusNotImplemented, hostlink.CodeUnsupported,
			fmt.Errorf("restore session %s: this host has no chunk store configured", sid))
	}
	if err := l.reg.Reserve(sid, spec); err != nil {
		return hostlink.MachineStatus{}, failure.New(http.StatusConflict, hostlink.CodeCapacity, err)
	}
	defer l.reg.Unreserve(sid)
	ctx, cancel := l.lease.OpContext(ctx)
	defer cancel()
	var (
		m      vmm.Machine
		parent chunk.Manifest
		err    error
	)
	if restore == nil {
		m, err = l.boot(ctx, sid, epoch, spec, harness)
	} else {
		m, parent, err = l.restore(ctx, sid, epoch, spec, restore, harness)
	}
	if err != nil {
		log.Error("start machine", "restore", restore != nil, "err", err)
		return hostlink.MachineStatus{}, err
	}
	mc := l.publish(sid, epoch, spec, m)
	mc.SetMemParent(parent)
	if err := l.hooks.Ready(ctx, mc); err != nil {
		if derr := l.destroy(ctx, sid, "harness did not start"); derr != nil {
			log.Error("destroy machine whose harness did not start", "err", derr)
		}
		return hostlink.MachineStatus{}, err
	}
	if restore != nil {
		l.checkpoint(ctx, "restore-ready")
	} else {
		l.checkpoint(ctx, "boot-ready")
	}
	log.Info("machine started", "pid", m.Info().PID, "memory_mib", spec.MemoryMiB, "vcpus", spec.VCPUs, "restored", restore != nil)
	return mc.Status(l.now()), nil
}

// adoptRunning answers a start of a session whose machine is already here:
// a running one is adopted at epoch, a paused one resumed, an exited one
// destroyed so a new one can start (ok false). Callers hold the session
// lock.
func (l *lifecycle) adoptRunning(ctx context.Context, sid string, epoch int64) (st hostlink.MachineStatus, ok bool, err error) {
	mc := l.reg.Get(sid)
	if mc == nil {
		return st, false, nil
	}
	running, exited, paused := mc.State()
	newer := epoch > running
	if exited {
		if err := l.destroy(ctx, sid, "exited; starting again"); err != nil {
			return st, false, err
		}
		return st, false, nil
	}
	if err := l.reg.AdoptEpoch(mc, epoch); err != nil {
		return st, false, err
	}
	if paused {
		l.resumeLocked(ctx, mc, "start request")
	}
	if _, _, paused := mc.State(); paused {
		return st, false, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused,
			fmt.Errorf("machine of session %s is paused and did not resume", sid))
	}
	if newer { // a newer op claims the running machine
		l.reg.Claim(mc)
	}
	return mc.Status(l.now()), true, nil
}

// boot boots a new machine for sid (its shared disks staged first).
func (l *lifecycle) boot(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, harness json.RawMessage) (vmm.Machine, error) {
	dir := l.reg.Dir(sid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create machine dir of session %s: %w", sid, err)
	}
	if err := l.reg.WriteRecord(sid, epoch, spec, false); err != nil {
		return nil, fmt.Errorf("record machine of session %s: %w", sid, err)
	}
	l.checkpoint(ctx, "boot-recorded")
	vspec := vmm.Spec{SessionID: sid, Epoch: epoch, Dir: dir, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: sessionEnv(sid, spec.Env)}
	shared := map[string]chunk.Manifest{}
	if err := snapshots.AddHarness(shared, harness); err != nil {
		_ = machines.CleanDir(dir)
		return nil, err
	}
	if err := l.snaps.AttachShared(ctx, sid, dir, shared, &vspec); err != nil {
		_ = machines.CleanDir(dir)
		return nil, err
	}
	nw, err := l.attachNetwork(ctx, sid, spec, &vspec)
	if err != nil {
		_ = machines.CleanDir(dir)
		return nil, err
	}
	m, err := l.backend.Boot(ctx, vspec)
	if err != nil {
		closeNetwork(nw)
		_ = machines.CleanDir(dir)
		return nil, failure.New(http.StatusInternalServerError, "boot_failed", fmt.Errorf("boot machine of session %s: %w", sid, err))
	}
	return withNetwork(m, nw), nil
}

// restore starts a machine for sid from a snapshot. Callers hold the
// session lock and have reserved capacity. It also returns the snapshot's
// memory manifest, which the next snapshot stores its changed memory
// chunks over.
func (l *lifecycle) restore(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, rs *hostlink.RestoreSpec, harness json.RawMessage) (vmm.Machine, chunk.Manifest, error) {
	dir := l.reg.Dir(sid)
	vspec := vmm.Spec{SessionID: sid, Epoch: epoch, Dir: dir, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: sessionEnv(sid, spec.Env)}
	nw, err := l.attachNetwork(ctx, sid, spec, &vspec)
	if err != nil {
		return nil, chunk.Manifest{}, err
	}
	m, mem, err := l.snaps.Restore(ctx, snapshots.Restore{
		SessionID: sid,
		Dir:       dir,
		Spec:      vspec,
		Snapshot:  rs,
		Harness:   harness,
		Record:    func() error { return l.reg.WriteRecord(sid, epoch, spec, false) },
		Clean:     func() { _ = machines.CleanDir(dir) },
	})
	if err != nil {
		closeNetwork(nw)
		return nil, mem, err
	}
	return withNetwork(m, nw), mem, nil
}

// publish enters vm in the registry as sid's machine, its helpers started.
func (l *lifecycle) publish(sid string, epoch int64, spec hostlink.MachineSpec, vm vmm.Machine) *machines.Machine {
	mc := machines.NewMachine(sid, epoch, spec, vm, l.now)
	l.hooks.Published(mc)
	l.reg.Publish(mc)
	return mc
}

// destroy stops sid's machine and its helpers and forgets it. Callers hold
// the session lock.
func (l *lifecycle) destroy(ctx context.Context, sid, reason string) error {
	mc, err := l.reg.Destroy(ctx, sid, reason)
	if mc != nil {
		l.snaps.DropMemory(sid)
		l.hooks.Stopped(mc)
	}
	return err
}

// destroyCommand serves a destroy request fenced at epoch.
func (l *lifecycle) destroyCommand(ctx context.Context, sid string, epoch int64) error {
	unlock := l.reg.Lock(sid)
	defer unlock()
	if err := l.reg.Fence(sid, epoch); err != nil {
		return err
	}
	return l.destroy(ctx, sid, "coordinator asked")
}

// usableMachine fences sid at epoch and returns its machine if it runs and
// the lease allows it to. Callers hold the session lock.
func (l *lifecycle) usableMachine(sid string, epoch int64) (*machines.Machine, error) {
	if err := l.reg.Fence(sid, epoch); err != nil {
		return nil, err
	}
	mc := l.reg.Get(sid)
	running, paused := false, false
	if mc != nil {
		_, exited, p := mc.State()
		running, paused = !exited, !exited && p
	}
	switch {
	case !running:
		return nil, failure.New(http.StatusNotFound, hostlink.CodeNotFound, fmt.Errorf("no running machine for session %s on this host", sid))
	case l.lease.Expired():
		return nil, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused, l.lease.Err())
	case paused:
		return nil, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused, fmt.Errorf("machine of session %s is paused", sid))
	}
	return mc, nil
}

// guestMachine returns sid's machine for a guest request at epoch.
func (l *lifecycle) guestMachine(sid string, epoch int64) (*machines.Machine, error) {
	unlock := l.reg.Lock(sid)
	defer unlock()
	return l.usableMachine(sid, epoch)
}

// sessionEnv is env plus the session's identity.
func sessionEnv(sid string, env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+1)
	maps.Copy(out, env)
	out[EnvSessionID] = sid
	return out
}
