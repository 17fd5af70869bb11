package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

const (
	machinesDir  = "machines"
	epochsDir    = "epochs"
	snapshotsDir = "snapshots"          // inside a machine dir: kept when the machine goes
	machineFile  = "engrams-agent.json" // inside a machine dir: what the agent needs to recover it

	defaultMemoryMiB = 512
	defaultVCPUs     = 1
)

// machine is one session's running (or exited) machine.
type machine struct {
	sessionID string
	epoch     int64
	spec      hostlink.MachineSpec
	m         vmm.Machine
	gen       uint64 // agent generation when started or adopted
	exited    bool
	paused    bool            // paused for the lease, or a resume after a snapshot failed
	transport *http.Transport // to the guest daemon
	memParent chunk.Manifest  // memory of the snapshot restored or last taken: the next one stores deltas over it

	lastActivity time.Time // last guest request through this host ended
	inflight     int       // guest requests in flight

	stopPump    context.CancelFunc // ends the harness event relay (harness_pump.go); nil without a harness
	stopTunnels context.CancelFunc // ends the model gateway tunnels (gateway.go); nil without a harness
}

// machineRecord is persisted in the machine's dir.
type machineRecord struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
	Paused    bool   `json:"paused,omitempty"`
	// Harness and HarnessID name the machine's harness bundle, so a
	// recovered machine relays its harness events and serves its gateway.
	Harness   string `json:"harness,omitempty"`
	HarnessID string `json:"harness_id,omitempty"`
}

// spec is the part of a machine's spec its record keeps.
func (r machineRecord) spec() hostlink.MachineSpec {
	return hostlink.MachineSpec{MemoryMiB: r.MemoryMiB, VCPUs: r.VCPUs, Harness: r.Harness, HarnessID: r.HarnessID}
}

// Machine states reported to the coordinator.
const (
	stateRunning = "running"
	statePaused  = "paused"
	stateExited  = "exited"
)

// status describes mc; callers hold Agent.mu.
func (mc *machine) status(now time.Time) hostlink.MachineStatus {
	st := hostlink.MachineStatus{SessionID: mc.sessionID, Epoch: mc.epoch, State: stateRunning,
		PID: mc.m.Info().PID, LastActivity: mc.lastActivity}
	if mc.inflight > 0 {
		st.LastActivity = now
	}
	switch {
	case mc.exited:
		st.State = stateExited
	case mc.paused:
		st.State = statePaused
	}
	return st
}

func (a *Agent) machineDir(sid string) string { return filepath.Join(a.cfg.DataDir, machinesDir, sid) }

// validSessionID keeps session ids safe as path components.
func validSessionID(sid string) bool {
	if sid == "" || len(sid) > 128 || sid == "." || sid == ".." {
		return false
	}
	for _, r := range sid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// writeFileSync atomically replaces dir/name with b, fsyncing the file and
// the directory.
func writeFileSync(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// cleanMachineDir removes a gone machine's dir, except its snapshots.
func cleanMachineDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean machine dir %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Name() == snapshotsDir {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clean machine dir %s: %w", dir, err)
		}
	}
	if len(entries) == 0 || !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == snapshotsDir }) {
		_ = os.Remove(dir)
	}
	return nil
}

// add registers a running machine and watches it exit.
func (a *Agent) add(sid string, epoch int64, spec hostlink.MachineSpec, m vmm.Machine) *machine {
	mc := &machine{sessionID: sid, epoch: epoch, spec: spec, m: m, lastActivity: a.deps.Now()}
	mc.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := m.Dial(ctx)
			if err != nil {
				return nil, fmt.Errorf("dial guest of session %s: %w", sid, err)
			}
			return c, nil
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	if spec.HarnessID != "" { // set before mc is published: stopHarness reads them under a.mu
		mc.stopPump = a.whileMachine(mc, func(ctx context.Context) { a.pump(ctx, mc) })
		mc.stopTunnels = a.whileMachine(mc, func(ctx context.Context) { a.runTunnels(ctx, mc) })
	}
	a.mu.Lock()
	a.gen++
	mc.gen = a.gen
	a.machines[sid] = mc
	a.mu.Unlock()
	a.watchers.Add(1)
	go func() {
		defer a.watchers.Done()
		select {
		case <-m.Done():
			a.mu.Lock()
			if a.machines[sid] == mc {
				mc.exited = true
			}
			a.mu.Unlock()
			a.log.Info("machine exited", "session_id", sid, "epoch", epoch)
		case <-a.stop:
		}
	}()
	return mc
}

// whileMachine runs fn in the background until the returned stop is
// called, mc exits or the agent stops; Run joins it. The harness event
// relay (harness_pump.go) and the gateway tunnels (gateway.go) run so.
func (a *Agent) whileMachine(mc *machine, fn func(ctx context.Context)) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	a.watchers.Add(1)
	go func() {
		defer a.watchers.Done()
		defer cancel()
		go func() { // ends with ctx at the latest (the deferred cancel)
			select {
			case <-a.stop:
			case <-mc.m.Done():
			case <-ctx.Done():
			}
			cancel()
		}()
		fn(ctx)
	}()
	return cancel
}

// stopHarness ends mc's harness event relay and gateway tunnels (if any).
func (a *Agent) stopHarness(mc *machine) {
	a.mu.Lock()
	stops := []context.CancelFunc{mc.stopPump, mc.stopTunnels}
	a.mu.Unlock()
	for _, stop := range stops {
		if stop != nil {
			stop()
		}
	}
}

// destroy stops sid's machine and forgets it. Callers hold the session lock.
func (a *Agent) destroy(ctx context.Context, sid, reason string) error {
	a.mu.Lock()
	mc := a.machines[sid]
	a.mu.Unlock()
	if mc == nil {
		return nil
	}
	if err := mc.m.Destroy(ctx); err != nil {
		return fmt.Errorf("destroy machine of session %s: %w", sid, err)
	}
	mc.transport.CloseIdleConnections()
	a.mu.Lock()
	if a.machines[sid] == mc {
		delete(a.machines, sid)
	}
	a.mu.Unlock()
	a.stopHarness(mc)
	if err := cleanMachineDir(a.machineDir(sid)); err != nil {
		a.log.Warn("machine destroyed, dir left behind", "session_id", sid, "error", err)
	}
	a.log.Info("machine destroyed", "session_id", sid, "epoch", mc.epoch, "reason", reason)
	return nil
}

// reconcile converges on what the coordinator says this host owns:
// machines not owned are destroyed; an owned machine listed at a higher
// epoch than it runs is kept and the epoch recorded (an op claim bumped it,
// so older commands are fenced); a paused owned machine is resumed if the
// lease allows. Machines started after gen (the request that returned
// owned was sent) are left alone: the answer predates them. A session
// whose lock is held (a snapshot or restore in flight) is skipped: the next
// heartbeat repeats the list, and the heartbeat loop never waits on it.
func (a *Agent) reconcile(ctx context.Context, owned []hostlink.Ownership, gen uint64) {
	want := make(map[string]int64, len(owned))
	for _, o := range owned {
		want[o.SessionID] = max(want[o.SessionID], o.Epoch)
	}
	a.mu.Lock()
	var todo []string
	for sid, mc := range a.machines {
		if mc.gen > gen {
			continue
		}
		if e, ok := want[sid]; !ok || e > mc.epoch || mc.paused {
			todo = append(todo, sid)
		}
	}
	a.mu.Unlock()
	for _, sid := range todo {
		a.reconcileOne(ctx, sid, want, gen)
	}
	a.pruneEpochs(want)
	a.pruneCaptures(want)
}

func (a *Agent) reconcileOne(ctx context.Context, sid string, want map[string]int64, gen uint64) {
	unlock, ok := a.locks.tryLock(sid)
	if !ok {
		return
	}
	defer unlock()
	a.mu.Lock()
	mc := a.machines[sid]
	a.mu.Unlock()
	if mc == nil || mc.gen > gen { // changed while we looked
		return
	}
	e, owned := want[sid]
	if !owned {
		if err := a.destroy(ctx, sid, "not owned by this host"); err != nil {
			a.log.Error("reconcile ownership", "session_id", sid, "error", err)
		}
		return
	}
	if err := a.adoptEpoch(mc, e); err != nil {
		a.log.Warn("record owned epoch", "session_id", sid, "epoch", e, "error", err)
		return
	}
	a.mu.Lock()
	paused, exited := mc.paused, mc.exited
	a.mu.Unlock()
	if paused && !exited {
		a.resumeLocked(ctx, mc, "coordinator confirmed ownership")
	}
}

// adoptEpoch fences sid at epoch and, if it is higher than the one mc
// runs, makes it mc's epoch (on disk too). Callers hold the session lock.
func (a *Agent) adoptEpoch(mc *machine, epoch int64) error {
	if err := a.fence(mc.sessionID, epoch); err != nil {
		return err
	}
	a.mu.Lock()
	if epoch <= mc.epoch {
		a.mu.Unlock()
		return nil
	}
	old := mc.epoch
	mc.epoch = epoch
	spec, paused := mc.spec, mc.paused
	a.mu.Unlock()
	a.log.Info("machine adopted at a newer epoch", "session_id", mc.sessionID, "epoch", epoch, "was", old)
	return a.writeRecord(mc.sessionID, epoch, spec, paused)
}

// snapshotState is the capacity in use and the machines, for the
// coordinator.
func (a *Agent) snapshotState() (hostlink.Capacity, []hostlink.MachineStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cap
	now := a.deps.Now()
	ms := make([]hostlink.MachineStatus, 0, len(a.machines))
	for _, mc := range a.machines {
		ms = append(ms, mc.status(now))
		if !mc.exited {
			c.UsedMemoryMiB += mc.spec.MemoryMiB
			c.UsedVCPUs += mc.spec.VCPUs
			c.Sessions++
		}
	}
	slices.SortFunc(ms, func(x, y hostlink.MachineStatus) int { return strings.Compare(x.SessionID, y.SessionID) })
	return c, ms
}

// reserve claims capacity for a boot in flight. Callers hold the session
// lock.
func (a *Agent) reserve(sid string, spec hostlink.MachineSpec) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	mem, cpus, n := spec.MemoryMiB, spec.VCPUs, 1
	for _, mc := range a.machines {
		if !mc.exited {
			mem, cpus, n = mem+mc.spec.MemoryMiB, cpus+mc.spec.VCPUs, n+1
		}
	}
	for _, r := range a.reserved {
		mem, cpus, n = mem+r.MemoryMiB, cpus+r.VCPUs, n+1
	}
	switch {
	case mem > a.cap.MemoryMiB:
		return fmt.Errorf("session %s needs %d MiB: %d MiB of %d in use or reserved", sid, spec.MemoryMiB, mem-spec.MemoryMiB, a.cap.MemoryMiB)
	case cpus > a.cap.VCPUs*hostlink.VCPUOvercommit: // the scheduler's rule
		return fmt.Errorf("session %s needs %d vCPUs: %d of %d (%d CPUs × %d) in use or reserved",
			sid, spec.VCPUs, cpus-spec.VCPUs, a.cap.VCPUs*hostlink.VCPUOvercommit, a.cap.VCPUs, hostlink.VCPUOvercommit)
	case a.cap.MaxSessions > 0 && n > a.cap.MaxSessions:
		return fmt.Errorf("session %s: this host runs at most %d sessions", sid, a.cap.MaxSessions)
	}
	a.reserved[sid] = spec
	return nil
}

func (a *Agent) unreserve(sid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.reserved, sid)
}

// keyedMutex serializes operations per session.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu sync.Mutex
	n  int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.n++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

// tryLock takes key's lock if it is free.
func (k *keyedMutex) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	if !e.mu.TryLock() {
		if e.n == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
		return nil, false
	}
	e.n++
	k.mu.Unlock()
	return k.unlocker(key, e), true
}

func (k *keyedMutex) unlocker(key string, e *keyedEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.n--
		if e.n == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
