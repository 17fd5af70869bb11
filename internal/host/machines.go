package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	transport *http.Transport // to the guest daemon
}

// machineRecord is persisted in the machine's dir.
type machineRecord struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
}

func (mc *machine) status() hostlink.MachineStatus {
	st := hostlink.MachineStatus{SessionID: mc.sessionID, Epoch: mc.epoch, State: "running", PID: mc.m.Info().PID}
	if mc.exited {
		st.State = "exited"
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

// highestEpoch is the highest epoch seen for sid, from the cache or disk.
// Callers hold the session lock.
func (a *Agent) highestEpoch(sid string) (int64, error) {
	a.mu.Lock()
	e, ok := a.epochs[sid]
	a.mu.Unlock()
	if ok {
		return e, nil
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, epochsDir, sid))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read epoch of session %s: %w", sid, err)
	}
	e, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse epoch of session %s: %w", sid, err)
	}
	a.mu.Lock()
	a.epochs[sid] = e
	a.mu.Unlock()
	return e, nil
}

// fence refuses epoch if it is below the highest seen for sid and
// durably records it if it is above. Callers hold the session lock.
func (a *Agent) fence(sid string, epoch int64) error {
	high, err := a.highestEpoch(sid)
	if err != nil {
		return err
	}
	if epoch < high {
		return &staleEpochError{sid: sid, got: epoch, high: high}
	}
	if epoch == high {
		return nil
	}
	if err := writeFileSync(filepath.Join(a.cfg.DataDir, epochsDir), sid, []byte(strconv.FormatInt(epoch, 10)+"\n")); err != nil {
		return fmt.Errorf("persist epoch %d of session %s: %w", epoch, sid, err)
	}
	a.mu.Lock()
	a.epochs[sid] = epoch
	a.mu.Unlock()
	return nil
}

type staleEpochError struct {
	sid       string
	got, high int64
}

func (e *staleEpochError) Error() string {
	return fmt.Sprintf("stale epoch %d for session %s: this host has seen epoch %d", e.got, e.sid, e.high)
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
	mc := &machine{sessionID: sid, epoch: epoch, spec: spec, m: m}
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
	if err := cleanMachineDir(a.machineDir(sid)); err != nil {
		a.log.Warn("machine destroyed, dir left behind", "session_id", sid, "error", err)
	}
	a.log.Info("machine destroyed", "session_id", sid, "epoch", mc.epoch, "reason", reason)
	return nil
}

// reconcile destroys every machine the coordinator does not say this host
// owns, or owns at a higher epoch than the machine runs. Machines started
// after gen (the request that returned owned was sent) are left alone: the
// answer predates them.
func (a *Agent) reconcile(ctx context.Context, owned []hostlink.Ownership, gen uint64) {
	want := make(map[string]int64, len(owned))
	for _, o := range owned {
		want[o.SessionID] = max(want[o.SessionID], o.Epoch)
	}
	a.mu.Lock()
	var doomed []string
	for sid, mc := range a.machines {
		if mc.gen > gen {
			continue
		}
		if e, ok := want[sid]; !ok || e > mc.epoch {
			doomed = append(doomed, sid)
		}
	}
	a.mu.Unlock()
	for _, sid := range doomed {
		a.reconcileOne(ctx, sid, want, gen)
	}
}

func (a *Agent) reconcileOne(ctx context.Context, sid string, want map[string]int64, gen uint64) {
	unlock := a.locks.lock(sid)
	defer unlock()
	a.mu.Lock()
	mc := a.machines[sid]
	a.mu.Unlock()
	if mc == nil || mc.gen > gen { // changed while we waited for the lock
		return
	}
	e, ok := want[sid]
	reason := "not owned by this host"
	if ok {
		reason = fmt.Sprintf("owned at epoch %d, machine runs epoch %d", e, mc.epoch)
		if err := a.fence(sid, e); err != nil {
			a.log.Warn("record owned epoch", "session_id", sid, "error", err)
		}
	}
	if err := a.destroy(ctx, sid, reason); err != nil {
		a.log.Error("reconcile ownership", "session_id", sid, "error", err)
	}
}

// snapshotState is the capacity in use and the machines, for the
// coordinator.
func (a *Agent) snapshotState() (hostlink.Capacity, []hostlink.MachineStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cap
	ms := make([]hostlink.MachineStatus, 0, len(a.machines))
	for _, mc := range a.machines {
		ms = append(ms, mc.status())
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
	case cpus > a.cap.VCPUs:
		return fmt.Errorf("session %s needs %d vCPUs: %d of %d in use or reserved", sid, spec.VCPUs, cpus-spec.VCPUs, a.cap.VCPUs)
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

// recoverMachines reattaches the machines a previous agent left running.
func (a *Agent) recoverMachines(ctx context.Context) error {
	root := filepath.Join(a.cfg.DataDir, machinesDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("create machines dir: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("list machines dir: %w", err)
	}
	for _, e := range entries {
		sid := e.Name()
		if !e.IsDir() || !validSessionID(sid) {
			continue
		}
		a.recoverOne(ctx, sid)
	}
	return nil
}

func (a *Agent) recoverOne(ctx context.Context, sid string) {
	log := a.log.With("session_id", sid)
	dir := a.machineDir(sid)
	rec := machineRecord{SessionID: sid}
	b, err := os.ReadFile(filepath.Join(dir, machineFile))
	if errors.Is(err, os.ErrNotExist) {
		// Nothing was ever booted here (or it was destroyed); keep snapshots.
		if err := cleanMachineDir(dir); err != nil {
			log.Warn("clean machine dir", "error", err)
		}
		return
	}
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		log.Error("machine not recovered: unreadable record", "error", err)
		return
	}
	m, err := a.deps.Backend.Recover(ctx, dir)
	if errors.Is(err, vmm.ErrGone) {
		log.Info("machine gone after agent restart; forgetting it")
		if err := cleanMachineDir(dir); err != nil {
			log.Warn("clean machine dir", "error", err)
		}
		return
	}
	if err != nil {
		log.Error("machine not recovered", "error", err)
		return
	}
	a.add(sid, rec.Epoch, hostlink.MachineSpec{MemoryMiB: rec.MemoryMiB, VCPUs: rec.VCPUs}, m)
	log.Info("machine recovered", "epoch", rec.Epoch, "pid", m.Info().PID)
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
