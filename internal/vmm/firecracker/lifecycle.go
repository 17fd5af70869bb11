package firecracker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// Snapshot file names inside the caller's directory, by role.
const (
	snapMemory = "memory.bin" // role "memory": full guest memory (a Diff layer is merged onto its base)
	snapState  = "vm.state"   // role "state": Firecracker's microVM state file
	snapDisk   = "disk.ext4"  // role "disk": the root disk at snapshot time
)

// Snapshot pauses the machine and writes memory, device state and the root
// disk into dir. The machine stays paused; Resume or Destroy it.
func (m *machine) Snapshot(ctx context.Context, dir string) (vmm.Snapshot, error) {
	snap, err := m.snapshot(ctx, dir)
	if err != nil {
		return snap, fmt.Errorf("snapshot %s: %w", m.st.SessionID, err)
	}
	return snap, nil
}

func (m *machine) snapshot(ctx context.Context, dir string) (vmm.Snapshot, error) {
	var snap vmm.Snapshot
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return snap, err
	}
	if err := m.api.patchVM(ctx, statePaused); err != nil {
		return snap, err
	}
	m.mu.Lock()
	base := m.st.BaseMemory
	m.mu.Unlock()
	kind := snapFull
	if m.b.cfg.DiffSnapshots && base != "" {
		if _, err := os.Stat(base); err == nil {
			kind = snapDiff
		}
	}
	for _, f := range []string{fileState, fileMem} {
		_ = os.Remove(m.work(f))
	}
	req := SnapshotCreate{SnapshotType: kind, SnapshotPath: fileState, MemFilePath: fileMem}
	if err := m.api.put(ctx, "/snapshot/create", req); err != nil {
		return snap, err
	}
	mem, state, disk := filepath.Join(dir, snapMemory), filepath.Join(dir, snapState), filepath.Join(dir, snapDisk)
	if err := moveFile(m.work(fileState), state); err != nil {
		return snap, err
	}
	if err := m.placeMemory(kind, base, mem); err != nil {
		return snap, err
	}
	// Paused: every write the guest saw complete is in the host page cache
	// of the disk file (Sync IO engine), so a copy now matches memory.
	if err := vmimage.CloneFile(m.work(fileRoot), disk); err != nil {
		return snap, err
	}
	if err := syncFiles(state, mem, disk); err != nil {
		return snap, err
	}
	if m.b.cfg.DiffSnapshots {
		m.mu.Lock()
		m.st.BaseMemory = mem
		m.mu.Unlock()
		if err := m.writeState(); err != nil {
			return snap, err
		}
	}
	return vmm.Snapshot{
		Backend: "firecracker",
		Files:   map[string]string{"memory": mem, "state": state, "disk": disk},
		Taken:   time.Now().UTC(),
	}, nil
}

// placeMemory puts a resumable memory file at dst: a Full one is moved
// there; a Diff layer is copied over a clone of its base (what Firecracker's
// snapshot-editor "rebase" does), leaving the base untouched.
func (m *machine) placeMemory(kind, base, dst string) error {
	if kind == snapFull {
		return moveFile(m.work(fileMem), dst)
	}
	if err := vmimage.CloneFile(base, dst); err != nil {
		return err
	}
	if err := mergeLayer(m.work(fileMem), dst); err != nil {
		return fmt.Errorf("merge diff snapshot: %w", err)
	}
	return os.Remove(m.work(fileMem))
}

func syncFiles(paths ...string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	return nil
}

// Pause pauses the microVM's vCPUs (PATCH /vm Paused) without saving anything.
func (m *machine) Pause(ctx context.Context) error {
	if err := m.api.patchVM(ctx, statePaused); err != nil {
		return fmt.Errorf("pause %s: %w", m.st.SessionID, err)
	}
	return nil
}

// Resume continues a machine paused by Pause or Snapshot.
func (m *machine) Resume(ctx context.Context) error {
	if err := m.api.patchVM(ctx, stateResumed); err != nil {
		return fmt.Errorf("resume %s: %w", m.st.SessionID, err)
	}
	return nil
}

// Restore starts a new Firecracker from snap and returns once its guest
// daemon answers, with the clock stepped and the kernel RNG reseeded.
func (b *Backend) Restore(ctx context.Context, spec vmm.Spec, snap vmm.Snapshot) (vmm.Machine, error) {
	m, err := b.restore(ctx, spec, snap)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", spec.SessionID, err)
	}
	b.log.Info("machine restored", "session_id", spec.SessionID, "pid", m.st.PID, "jailed", m.st.Jailed)
	return m, nil
}

func (b *Backend) restore(ctx context.Context, spec vmm.Spec, snap vmm.Snapshot) (*machine, error) {
	spec, err := normalize(spec)
	if err != nil {
		return nil, err
	}
	if snap.Backend != "firecracker" {
		return nil, fmt.Errorf("snapshot is from backend %q: %w", snap.Backend, vmm.ErrUnsupported)
	}
	for _, role := range []string{"memory", "state", "disk"} {
		if snap.Files[role] == "" {
			return nil, fmt.Errorf("snapshot has no %q file", role)
		}
	}
	m, err := b.newMachine(spec)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*machine, error) {
		tail := m.logTail()
		_ = m.Destroy(context.Background())
		return nil, fmt.Errorf("%w%s", err, tail)
	}
	if err := vmimage.CloneFile(snap.Files["disk"], m.work(fileRoot)); err != nil {
		return fail(err)
	}
	if err := m.prepare(false); err != nil {
		return fail(err)
	}
	if err := stage(snap.Files["state"], m.work(fileState), m.st.Jailed); err != nil {
		return fail(err)
	}
	if err := m.launch(ctx); err != nil {
		return fail(err)
	}
	if err := m.load(ctx, snap); err != nil {
		return fail(err)
	}
	if err := m.handshake(ctx, spec.Env, spec.Rebind); err != nil {
		return fail(err)
	}
	return m, nil
}

// load configures logging and metrics (the only calls allowed before a
// load), then loads the snapshot and resumes the VM.
func (m *machine) load(ctx context.Context, snap vmm.Snapshot) error {
	if err := m.api.put(ctx, "/logger", Logger{LogPath: fileLog, Level: "Warning", ShowLevel: true}); err != nil {
		return err
	}
	if err := m.api.put(ctx, "/metrics", Metrics{MetricsPath: fileMetrics}); err != nil {
		return err
	}
	mb := MemBackend{BackendType: memBackendFile, BackendPath: fileMem}
	if m.b.cfg.MemBackend == memBackendUffd {
		stop, err := m.b.uffd.Start(ctx, m.work(fileUffd), snap.Files["memory"])
		if err != nil {
			return fmt.Errorf("start uffd server: %w", err)
		}
		m.mu.Lock()
		m.uffdStop = stop
		m.mu.Unlock()
		mb = MemBackend{BackendType: memBackendUffd, BackendPath: fileUffd}
		m.st.Uffd = true
	} else if err := stage(snap.Files["memory"], m.work(fileMem), m.st.Jailed); err != nil {
		return err
	}
	req := SnapshotLoad{SnapshotPath: fileState, MemBackend: mb, TrackDirtyPages: m.b.cfg.DiffSnapshots, ResumeVM: true}
	if err := m.api.put(ctx, "/snapshot/load", req); err != nil {
		return err
	}
	if m.b.cfg.DiffSnapshots {
		// Load resets dirty tracking: the next Diff builds on this memory.
		m.mu.Lock()
		m.st.BaseMemory = snap.Files["memory"]
		m.mu.Unlock()
	}
	return m.writeState()
}

// Destroy stops Firecracker (SIGTERM, then SIGKILL to its process group)
// and removes its sockets, FIFOs, disks, jail and machine.json. Idempotent.
func (m *machine) Destroy(ctx context.Context) error {
	m.mu.Lock()
	m.destroyed = true
	pid, start := m.st.PID, m.st.StartTime
	m.mu.Unlock()
	if pid > 0 {
		if !vmproc.Stop(pid, start, m.b.cfg.StopGrace, true) {
			return fmt.Errorf("destroy %s: firecracker pid %d did not exit", m.st.SessionID, pid)
		}
		select {
		case <-m.done:
		case <-ctx.Done():
			return fmt.Errorf("destroy %s: %w", m.st.SessionID, ctx.Err())
		}
	}
	m.cleanup()
	return nil
}

// cleanup stops the drains and removes every file the machine created.
func (m *machine) cleanup() {
	m.mu.Lock()
	logs, metrics, uffdStop := m.logs, m.metrics, m.uffdStop
	m.logs, m.metrics, m.uffdStop = nil, nil, nil
	m.mu.Unlock()
	logs.stop()
	metrics.stop()
	if uffdStop != nil {
		_ = uffdStop()
	}
	if m.api != nil {
		m.api.close()
	}
	for _, f := range []string{fileAPI, fileVsock, fileLog, fileMetrics, fileOut, filePID, fileRoot, fileBundle,
		fileKernel, fileInitrd, fileState, fileMem, fileUffd} {
		_ = os.Remove(m.work(f))
	}
	if m.st.Jailed && m.st.ChrootDir != "" && strings.HasPrefix(m.st.ChrootDir, filepath.Clean(m.b.cfg.ChrootBase)+"/") {
		_ = os.RemoveAll(m.st.ChrootDir)
	}
	if m.st.Cgroup != "" {
		_ = os.Remove(m.st.Cgroup)
	}
	p := filepath.Join(m.st.Dir, fileMachine)
	_ = os.Remove(p)
	_ = os.Remove(p + ".tmp")
}

// Recover reattaches to the machine whose machine.json is in dir when its
// process (pid and start time) lives and its API answers; otherwise it
// kills what is left, removes its files and returns vmm.ErrGone.
func (b *Backend) Recover(ctx context.Context, dir string) (vmm.Machine, error) {
	var st state
	data, err := os.ReadFile(filepath.Join(dir, fileMachine))
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w: %v", dir, vmm.ErrGone, err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("recover %s: %w: bad state: %v", dir, vmm.ErrGone, err)
	}
	st.Dir = dir
	m := &machine{b: b, st: st, done: make(chan struct{}), api: newAPIClient(st.APISocket), ctlID: randomID()}
	gone := func(why error) (vmm.Machine, error) {
		vmproc.Stop(st.PID, st.StartTime, b.cfg.StopGrace, true)
		m.cleanup()
		return nil, fmt.Errorf("recover %s: %w: %v", st.SessionID, vmm.ErrGone, why)
	}
	if !vmproc.Alive(st.PID, st.StartTime) {
		return gone(fmt.Errorf("firecracker pid %d is not running", st.PID))
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = m.api.describe(actx)
	cancel()
	if err != nil {
		return gone(err)
	}
	vmproc.WatchExit(st.PID, st.StartTime, m.done)
	if m.logs, err = startDrain(m.work(fileLog), b.cfg.LogMax); err != nil {
		b.log.Warn("firecracker log not drained", "session_id", st.SessionID, "err", err)
	}
	if m.metrics, err = startDrain(m.work(fileMetrics), 16<<10); err != nil {
		b.log.Warn("firecracker metrics not drained", "session_id", st.SessionID, "err", err)
	}
	if st.Uffd {
		b.log.Warn("recovered a machine restored with the Uffd backend: its page-fault server died with the old host agent", "session_id", st.SessionID)
	}
	b.log.Info("machine reattached", "session_id", st.SessionID, "pid", st.PID)
	return m, nil
}
