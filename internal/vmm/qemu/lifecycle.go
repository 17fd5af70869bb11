package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// Snapshot file names and roles.
const (
	snapMemory = "memory.ram"    // role "memory": guest RAM, byte for byte (sparse; page i at offset i*4096)
	snapState  = "state.bin"     // role "state": device state (QEMU migration stream without RAM)
	snapDisk   = "disk.qcow2"    // role "disk": the overlay, backed by the shared base image
	snapConfig = "snapshot.json" // role "config": what the restore command line needs
)

// Snapshot pauses the machine and writes its device state, its disk and
// its RAM into dir. The machine stays paused. The "memory" file is a hard
// link of the machine's RAM file when dir is on the same file system: it
// is valid while the machine stays paused and after Destroy, but a Resume
// changes it as the guest runs (see vmm.Machine.Snapshot).
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
	// Drop the guest session first: the guest daemon sees the port close
	// and waits for a new session, which is what a restore brings.
	m.setPaused(true)
	m.setMux(nil)
	stateFile := filepath.Join(dir, snapState)
	err := m.withQMP(ctx, func(q *QMP) error { return m.migrateToFile(ctx, q, stateFile) })
	if err != nil {
		return snap, err
	}
	// Stopped and migrated: nothing writes guest RAM until cont.
	mem := filepath.Join(dir, snapMemory)
	if err := linkOrClone(m.path(fileMemory), mem); err != nil {
		return snap, fmt.Errorf("save guest memory: %w", err)
	}
	// Migration completion flushed and inactivated the block devices, so
	// the overlay file is consistent now.
	if err := m.writeSnapDisk(ctx, filepath.Join(dir, snapDisk)); err != nil {
		return snap, err
	}
	refs, err := m.b.imageRefs(m.st.Images, m.st.RootFSID)
	if err != nil {
		return snap, err
	}
	cmdline := m.st.Cmdline
	if cmdline == "" { // started before the command line was recorded
		cmdline = kernelCmdline(m.b.tscKHz, guestParams(m.st.Hostname, m.st.Network, m.st.Harness != nil))
	}
	format := snapFormat
	if m.st.Harness == nil { // restored from an older snapshot: it stays one
		format = snapFormatNoHarness
	}
	cfg := snapConfigFile{
		Format: format, Harness: snapHarnessOf(m.st.Harness), QEMUVersion: m.b.version, Accel: m.st.Accel, MemoryMiB: m.st.MemoryMiB,
		VCPUs: m.st.VCPUs, Network: m.st.Network, Hostname: m.st.Hostname, Cmdline: cmdline,
		KernelVersion: m.st.Images.KernelVersion, Images: refs,
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, snapConfig), data, 0o644); err != nil {
		return snap, err
	}
	return vmm.Snapshot{
		Backend: "qemu",
		Files: map[string]string{
			"memory": mem, "state": stateFile, "disk": filepath.Join(dir, snapDisk), "config": filepath.Join(dir, snapConfig),
		},
		Taken: time.Now().UTC(),
	}, nil
}

// ignoreShared makes migration skip shared RAM blocks (the guest RAM
// file): the stream carries device state only. Source and destination
// must agree on it.
func ignoreShared(ctx context.Context, q *QMP) error {
	return q.Execute(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	}, nil)
}

// migrateToFile stops the VM and writes its device state (not its RAM,
// which is the shared file) to path.
func (m *machine) migrateToFile(ctx context.Context, q *QMP, path string) error {
	if err := q.Execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(100) << 30}, nil); err != nil {
		return err
	}
	if err := ignoreShared(ctx, q); err != nil {
		return err
	}
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return err
	}
	m.b.checkpoint(ctx, "qemu-paused")
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": "exec:cat > " + shellQuote(path)}, nil); err != nil {
		return err
	}
	return waitMigration(ctx, q)
}

func waitMigration(ctx context.Context, q *QMP) error {
	for {
		var r struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := q.Execute(ctx, "query-migrate", nil, &r); err != nil {
			return err
		}
		switch r.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", r.Status, r.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			_ = q.Execute(context.Background(), "migrate_cancel", nil, nil)
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Pause stops the machine's vCPUs (QMP stop) without saving anything. The
// guest session stays; Resume continues.
func (m *machine) Pause(ctx context.Context) error {
	// Drop the guest session first, as Snapshot does: requests caught
	// mid-flight by the pause must not leave the session wedged; Resume
	// connects a fresh one.
	m.setPaused(true)
	m.setMux(nil)
	err := m.withQMP(ctx, func(q *QMP) error { return q.Execute(ctx, "stop", nil, nil) })
	if err != nil {
		return fmt.Errorf("pause %s: %w", m.st.SessionID, err)
	}
	return nil
}

// Resume continues a machine paused by Pause or Snapshot and reconnects
// the guest if its session ended.
func (m *machine) Resume(ctx context.Context) error {
	err := m.withQMP(ctx, func(q *QMP) error { return q.Execute(ctx, "cont", nil, nil) })
	if err != nil {
		return fmt.Errorf("resume %s: %w", m.st.SessionID, err)
	}
	m.setPaused(false)
	if _, err := m.guestMux(ctx); err != nil {
		return fmt.Errorf("resume %s: %w (console: %s)", m.st.SessionID, err, m.consoleTail())
	}
	return nil
}

func (m *machine) setPaused(p bool) {
	m.mu.Lock()
	m.paused = p
	m.mu.Unlock()
}

// Destroy stops QEMU (QMP quit, then SIGKILL) and removes the sockets,
// overlay, RAM file, pid file, console log, state file and cgroup. A
// snapshot's hard link of the RAM file keeps its data. Idempotent.
func (m *machine) Destroy(ctx context.Context) error {
	m.mu.Lock()
	m.destroyed = true
	m.mu.Unlock()
	m.setMux(nil)
	if vmproc.Alive(m.st.PID, m.st.StartTime) {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = m.withQMP(qctx, func(q *QMP) error { return q.Execute(qctx, "quit", nil, nil) })
		cancel()
	}
	if !vmproc.WaitGone(m.st.PID, m.st.StartTime, 3*time.Second) {
		m.kill()
	}
	if !vmproc.WaitGone(m.st.PID, m.st.StartTime, 5*time.Second) {
		return fmt.Errorf("destroy %s: qemu pid %d did not exit", m.st.SessionID, m.st.PID)
	}
	if m.done != nil {
		<-m.done
	}
	m.cleanup()
	return nil
}

func (m *machine) kill() { vmproc.Signal(m.st.PID, m.st.StartTime, unix.SIGKILL, false) }

// cleanup removes every file the machine created in its directory.
func (m *machine) cleanup() {
	if m.stop != nil {
		m.stop()
	}
	for _, f := range []string{fileQMP, fileGuest, fileGuest2, fileCtl, fileSerial, filePID, fileDisk, fileHarness,
		fileMemory, fileSerLog, fileSerLog + ".1", fileMachine, fileMachine + ".tmp"} {
		_ = os.Remove(m.path(f))
	}
	if m.st.Cgroup != "" {
		_ = os.Remove(m.st.Cgroup)
	}
}

// Restore starts a new QEMU from snap and returns once its guest daemon
// answers, with the clock stepped and the kernel RNG reseeded.
func (b *Backend) Restore(ctx context.Context, spec vmm.Spec, snap vmm.Snapshot) (vmm.Machine, error) {
	m, err := b.restore(ctx, spec, snap)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", spec.SessionID, err)
	}
	return m, nil
}

func (b *Backend) restore(ctx context.Context, spec vmm.Spec, snap vmm.Snapshot) (*machine, error) {
	t0 := time.Now()
	cfg, err := b.readSnapConfig(spec, snap)
	if err != nil {
		return nil, err
	}
	if err := checkNetwork(spec); err != nil {
		return nil, err
	}
	if spec.Network != nil && !cfg.Network {
		// The NIC is device state: a snapshot without one cannot gain it.
		return nil, fmt.Errorf("the snapshot's machine has no NIC to attach the network to: %w", vmm.ErrUnsupported)
	}
	images, err := b.localImages(cfg.Images, spec.RootFS)
	if err != nil {
		return nil, err
	}
	stateFile, err := filepath.Abs(snap.Files["state"])
	if err != nil {
		return nil, err
	}
	harness, remount, err := b.restoreHarness(cfg.Harness, spec)
	if err != nil {
		return nil, err
	}
	if err := b.placeHarnessDisk(ctx, spec.Dir, harness); err != nil {
		return nil, err
	}
	tImages := time.Since(t0)
	if err := placeRestoredMemory(snap.Files["memory"], spec.Dir, cfg.MemoryMiB, snap.ServedMemory); err != nil {
		_ = os.Remove(filepath.Join(spec.Dir, fileHarness))
		return nil, err
	}
	if err := b.placeRestoredDisk(ctx, snap.Files["disk"], spec.Dir, images.RootFS); err != nil {
		_ = os.Remove(filepath.Join(spec.Dir, fileMemory))
		_ = os.Remove(filepath.Join(spec.Dir, fileHarness))
		return nil, err
	}
	tDisk := time.Since(t0)
	hostname := cfg.Hostname
	if spec.Hostname != "" {
		hostname = guestParams(spec.Hostname, false, false).Hostname
	}
	st := state{
		Info:  vmm.Info{SessionID: spec.SessionID, Backend: "qemu", Dir: spec.Dir, Created: time.Now().UTC()},
		Accel: cfg.Accel, MemoryMiB: cfg.MemoryMiB, VCPUs: cfg.VCPUs, Network: cfg.Network,
		Tap:    spec.Network != nil,
		Images: images, RootFSID: cfg.Images["rootfs"].ID, Hostname: hostname, Cmdline: cfg.Cmdline,
		Harness: harness,
	}
	m, err := b.startState(ctx, st, tapOf(spec), true)
	if err != nil {
		_ = os.Remove(filepath.Join(spec.Dir, fileDisk))
		_ = os.Remove(filepath.Join(spec.Dir, fileMemory))
		_ = os.Remove(filepath.Join(spec.Dir, fileHarness))
		return nil, err
	}
	tStart := time.Since(t0)
	mode := atRestore
	if spec.Rebind {
		mode = atRebind
	}
	if err := m.finishRestore(ctx, spec.Env, stateFile, mode, remount); err != nil {
		_ = m.Destroy(context.Background())
		return nil, err
	}
	if err := m.markReady(); err != nil {
		_ = m.Destroy(context.Background())
		return nil, err
	}
	b.log.Info("machine restored", "session_id", spec.SessionID, "pid", m.st.PID, "accel", m.st.Accel,
		"rebind", spec.Rebind, "rootfs_id", m.st.RootFSID, "harness_remounted", remount, "images_ms", tImages.Milliseconds(), "disk_ms", tDisk.Milliseconds(), "vmm_started_ms", tStart.Milliseconds(), "ready_ms", time.Since(t0).Milliseconds())
	return m, nil
}

// finishRestore loads the device state from stateFile (the RAM is the
// file QEMU mapped), continues the VM, then steps the guest clock, reseeds
// its RNG and reconnects the guest daemon (restarted first for atRebind,
// after init mounted the harness disk again when remount).
func (m *machine) finishRestore(ctx context.Context, env map[string]string, stateFile string, mode handshakeMode, remount bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.b.cfg.ReadyTimeout)
	defer cancel()
	t0 := time.Now()
	err := m.withQMP(ctx, func(q *QMP) error {
		if err := ignoreShared(ctx, q); err != nil {
			return err
		}
		if err := q.Execute(ctx, "migrate-incoming", map[string]any{"uri": "exec:cat " + shellQuote(stateFile)}, nil); err != nil {
			return err
		}
		return m.awaitIncoming(ctx, q)
	})
	if err != nil {
		return err
	}
	m.b.log.Debug("incoming migration done", "ms", time.Since(t0).Milliseconds())
	return m.handshake(ctx, env, mode, remount)
}

// Recover reattaches to the machine whose state is in dir, or kills what is
// left of it, removes its files and returns vmm.ErrGone. A machine whose
// boot or restore never finished (the record still says Starting: nobody
// was told it runs) is killed too, found by its recorded pid or, when the
// agent died before recording it, by its spawn marker; so is every other
// QEMU process marked for dir.
func (b *Backend) Recover(ctx context.Context, dir string) (vmm.Machine, error) {
	var st state
	data, err := os.ReadFile(filepath.Join(dir, fileMachine))
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err != nil {
		b.reapIn(dir, func(vmproc.Marked) bool { return true })
		return nil, fmt.Errorf("recover %s: %w: no usable %s: %v", dir, vmm.ErrGone, fileMachine, err)
	}
	st.Dir = dir
	m := &machine{b: b, st: st, info: st.Info, ctlID: randomID()}
	// Whatever runs here but the recorded spawn (QEMU and its helpers) is
	// nobody's.
	recorded := vmm.Process{PID: st.PID, StartTime: st.StartTime}
	b.reapIn(dir, func(p vmproc.Marked) bool {
		return st.Starting || (p.Spawn != st.Spawn && p.Process != recorded)
	})
	switch {
	case st.Starting:
		m.kill()
		vmproc.WaitGone(st.PID, st.StartTime, 5*time.Second)
		m.cleanup()
		return nil, fmt.Errorf("recover %s: %w: its boot or restore never finished", st.SessionID, vmm.ErrGone)
	case !vmproc.Alive(st.PID, st.StartTime):
		m.cleanup()
		return nil, fmt.Errorf("recover %s: %w: qemu pid %d is not running", st.SessionID, vmm.ErrGone, st.PID)
	}
	if err := m.attach(ctx); err != nil {
		m.kill()
		vmproc.WaitGone(st.PID, st.StartTime, 5*time.Second)
		m.cleanup()
		return nil, fmt.Errorf("recover %s: %w: %v", st.SessionID, vmm.ErrGone, err)
	}
	if err := m.rebindGuestChannel(ctx); err != nil {
		b.log.Warn("guest channel not rebound; a stale client may hold it", "session_id", st.SessionID, "err", err)
	}
	b.log.Info("machine reattached", "session_id", st.SessionID, "pid", st.PID)
	return m, nil
}

// awaitIncoming waits until the incoming migration finished, then continues.
func (m *machine) awaitIncoming(ctx context.Context, q *QMP) error {
	for {
		s, err := q.QueryStatus(ctx)
		if err != nil {
			return err
		}
		if s.Status != "inmigrate" {
			if s.Status != "paused" && s.Status != "running" {
				return fmt.Errorf("incoming migration ended in state %q", s.Status)
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.done:
			return errors.New("qemu exited during incoming migration")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return q.Execute(ctx, "cont", nil, nil)
}
