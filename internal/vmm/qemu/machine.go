package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/guestinit/initproto"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// state is what machine.json holds: vmm.Info plus what Recover and
// Snapshot need to rebuild the machine.
type state struct {
	vmm.Info
	Accel     string         `json:"accel"`
	MemoryMiB int            `json:"memory_mib"`
	VCPUs     int            `json:"vcpus"`
	Network   bool           `json:"network"`       // the machine has a NIC
	Tap       bool           `json:"tap,omitempty"` // its backend is the caller's TAP (vmm.Spec.Network)
	Images    vmimage.Images `json:"images"`
	RootFSID  string         `json:"rootfs_id,omitempty"` // Images.RootFS is the caller's (vmm.RootFS.ID)
	Cgroup    string         `json:"cgroup,omitempty"`
	Hostname  string         `json:"hostname"`
	Cmdline   string         `json:"cmdline"`           // guest kernel command line, kept across restores
	Harness   *harnessDisk   `json:"harness,omitempty"` // nil: no harness disk (restored from an older snapshot)
	// Spawn is the marker id of the QEMU process (vmproc.EnvSpawn), and
	// Starting says its boot or restore has not finished: the record is
	// written before QEMU is spawned (without a pid), again with the pid,
	// and once more when the guest answers, so a crash at any point leaves
	// a record a restarted agent finds the process by. Records of agents
	// before spawn ids have neither: they were written once QEMU ran.
	Spawn    string `json:"spawn,omitempty"`
	Starting bool   `json:"starting,omitempty"`
}

type machine struct {
	b     *Backend
	st    state
	info  vmm.Info
	qmpMu sync.Mutex // one QMP connection at a time from this handle
	done  chan struct{}
	stop  context.CancelFunc // ends the serial drain

	connMu    sync.Mutex // serializes guest reconnects
	mu        sync.Mutex
	mux       *guestapi.Mux
	verified  time.Time // when mux last answered; see Dial
	paused    bool      // stopped by Pause or Snapshot: no guest session until Resume
	destroyed bool
	ctlID     uint64
}

func (m *machine) path(name string) string { return filepath.Join(m.st.Dir, name) }

func (m *machine) Info() vmm.Info { return m.info }

func (m *machine) Done() <-chan struct{} { return m.done }

func normalize(spec vmm.Spec) (vmm.Spec, error) {
	if spec.Dir == "" {
		return spec, errors.New("spec.Dir is required")
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 256
	}
	if spec.VCPUs == 0 {
		spec.VCPUs = 1
	}
	if spec.MemoryMiB < 64 || spec.VCPUs < 1 {
		return spec, fmt.Errorf("bad machine size: %d MiB, %d vCPUs", spec.MemoryMiB, spec.VCPUs)
	}
	return spec, checkNetwork(spec)
}

// start boots QEMU for spec over the root image root (rootID: the
// caller's identity of it, "" for the configured one) with harness disk h
// and attaches to it. On error nothing is left running.
func (b *Backend) start(ctx context.Context, spec vmm.Spec, accel, root, rootID string, h *harnessDisk) (*machine, error) {
	st := state{
		Info:  vmm.Info{SessionID: spec.SessionID, Backend: "qemu", Dir: spec.Dir, Created: time.Now().UTC()},
		Accel: accel, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Network: b.cfg.Network || spec.Network != nil,
		Tap:    spec.Network != nil,
		Images: b.cfg.Images, RootFSID: rootID, Hostname: guestParams(spec.Hostname, false, false).Hostname,
		Harness: h,
	}
	st.Images.RootFS = root
	st.Cmdline = kernelCmdline(b.tscKHz, guestParams(st.Hostname, st.Network, h != nil))
	return b.startState(ctx, st, tapOf(spec), false)
}

// tapOf is the TAP fd a spec brings, or nil.
func tapOf(spec vmm.Spec) *os.File {
	if spec.Network == nil {
		return nil
	}
	return spec.Network.Tap
}

// checkNetwork refuses a Spec.Network without a TAP.
func checkNetwork(spec vmm.Spec) error {
	if spec.Network != nil && spec.Network.Tap == nil {
		return errors.New("spec.Network has no TAP device")
	}
	return nil
}

// startState launches QEMU for st (booting, or restoring from incoming)
// and attaches to it. The machine record goes first (write-ahead: its
// spawn id, no pid), then QEMU, marked with the dir and spawn id, then the
// record with the pid; the machine stays Starting until markReady. tap
// (st.Tap) is the NIC's TAP, inherited by QEMU. On error nothing is left
// running.
func (b *Backend) startState(ctx context.Context, st state, tap *os.File, incoming bool) (*machine, error) {
	st.Socket = filepath.Join(st.Dir, fileGuest)
	for _, f := range []string{fileQMP, fileGuest, fileGuest2, fileCtl, fileSerial, filePID} {
		_ = os.Remove(filepath.Join(st.Dir, f))
	}
	st.Spawn, st.Starting, st.PID, st.StartTime = vmproc.NewSpawnID(), true, 0, 0
	m := &machine{b: b, st: st, ctlID: randomID()}
	if err := m.writeState(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	pid, err := b.spawn(st, tap, incoming)
	if err != nil {
		b.reapSpawn(st.Dir, st.Spawn)
		_ = os.Remove(m.path(fileMachine))
		return nil, err
	}
	if incoming {
		b.checkpoint(ctx, "qemu-spawned-restore")
	} else {
		b.checkpoint(ctx, "qemu-spawned")
	}
	m.st.PID, m.st.StartTime = pid.PID, pid.StartTime
	if b.cgroup {
		mem := int64(st.MemoryMiB+b.cfg.OverheadMiB) << 20
		dir, err := placeInCgroup(b.cfg.CgroupParent, cgroupName(st.SessionID, pid.PID), pid.PID, mem, st.VCPUs)
		if err != nil {
			b.log.Warn("qemu cgroup", "session_id", st.SessionID, "err", err)
		}
		m.st.Cgroup = dir
	}
	if m.st.Tap {
		m.st.TapFD = tapFD
	}
	m.info = m.st.Info
	if err := m.writeState(); err != nil {
		b.reapSpawn(st.Dir, st.Spawn)
		m.cleanup()
		return nil, err
	}
	if err := m.attach(ctx); err != nil {
		m.kill()
		m.cleanup()
		return nil, err
	}
	return m, nil
}

// tapFD is the fd QEMU inherits its TAP at (ExtraFiles[0]) and keeps it
// at (vmm.Info.TapFD).
const tapFD = 3

// spawn runs QEMU for st (it daemonizes) and returns the daemon's pid and
// start time. A tap becomes QEMU's fd 3, its NIC's backend.
func (b *Backend) spawn(st state, tap *os.File, incoming bool) (vmm.Process, error) {
	l := launch{
		QEMU: b.cfg.QEMU, Accel: st.Accel, MemoryMiB: st.MemoryMiB, VCPUs: st.VCPUs,
		Kernel: st.Images.Kernel, Initramfs: st.Images.Initramfs, Bundle: st.Images.Bundle,
		Disk:    filepath.Join(st.Dir, fileDisk),
		Memory:  filepath.Join(st.Dir, fileMemory),
		PIDFile: filepath.Join(st.Dir, filePID),
		Cmdline: st.Cmdline,
		Name:    st.SessionID, Network: st.Network, Incoming: incoming,
	}
	if st.Harness != nil {
		l.Harness = filepath.Join(st.Dir, fileHarness)
	}
	if st.Tap != (tap != nil) {
		return vmm.Process{}, fmt.Errorf("start qemu: the machine's TAP is missing or unexpected")
	}
	if tap != nil {
		l.TapFD = tapFD
	}
	marker, err := vmproc.MarkerEnv(st.Dir, st.Spawn)
	if err != nil {
		return vmm.Process{}, fmt.Errorf("start qemu: %w", err)
	}
	var out bytes.Buffer
	cmd := exec.Command(l.QEMU, l.args()...)
	cmd.Dir = st.Dir
	cmd.Env = append(os.Environ(), marker...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if tap != nil {
		cmd.ExtraFiles = []*os.File{tap}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // survives a host-agent kill
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return vmm.Process{}, fmt.Errorf("start qemu: %w: %s", err, strings.TrimSpace(out.String()))
	}
	pid, err := vmproc.ReadPIDFile(l.PIDFile)
	if err != nil {
		return vmm.Process{}, fmt.Errorf("start qemu: %w", err)
	}
	start, err := vmproc.StartTime(pid)
	if err != nil {
		return vmm.Process{}, fmt.Errorf("start qemu: pid %d: %w", pid, err)
	}
	return vmm.Process{PID: pid, StartTime: start}, nil
}

// markReady records that the machine's guest answered: from now on a
// restarted agent reattaches it.
func (m *machine) markReady() error {
	m.mu.Lock()
	m.st.Starting = false
	m.mu.Unlock()
	return m.writeState()
}

func (m *machine) writeState() error {
	m.mu.Lock()
	data, err := json.MarshalIndent(m.st, "", "  ")
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	tmp := m.path(fileMachine + ".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	if err := os.Rename(tmp, m.path(fileMachine)); err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	return nil
}

// withQMP runs f on a fresh QMP connection. QMP sockets take one client
// at a time, so no handle keeps one open: a second handle (Recover while
// an old handle lives) must be able to connect.
func (m *machine) withQMP(ctx context.Context, f func(q *QMP) error) error {
	m.qmpMu.Lock()
	defer m.qmpMu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	q, err := DialQMP(dctx, m.path(fileQMP))
	cancel()
	if err != nil {
		return err
	}
	defer q.Close()
	return f(q)
}

// attach checks QMP answers, starts the console drain and the exit watch.
func (m *machine) attach(ctx context.Context) error {
	err := m.withQMP(ctx, func(q *QMP) error {
		_, err := q.QueryStatus(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("attach qemu %d: %w", m.st.PID, err)
	}
	m.done = make(chan struct{})
	vmproc.WatchExit(m.st.PID, m.st.StartTime, m.done)
	sctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	go drainSerial(sctx, m.path(fileSerial), m.path(fileSerLog), m.b.cfg.SerialLogMax)
	return nil
}

// Boot starts a machine from the configured images and returns once its
// guest daemon answers.
func (b *Backend) Boot(ctx context.Context, spec vmm.Spec) (vmm.Machine, error) {
	spec, err := normalize(spec)
	if err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	root, rootID := b.cfg.Images.RootFS, ""
	if spec.RootFS != nil {
		if root, err = checkRootFS(spec.RootFS); err != nil {
			return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
		}
		rootID = spec.RootFS.ID
	}
	h, err := b.bootHarness(spec.Harness)
	if err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	if err := b.placeHarnessDisk(ctx, spec.Dir, h); err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	disk := filepath.Join(spec.Dir, fileDisk)
	if err := vmimage.Overlay(ctx, b.cfg.QemuImg, root, disk); err != nil {
		_ = os.Remove(filepath.Join(spec.Dir, fileHarness))
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	// QEMU would map a stale RAM file as it is: boot from a fresh one.
	if err := os.Remove(filepath.Join(spec.Dir, fileMemory)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	m, err := b.start(ctx, spec, b.accel, root, rootID, h)
	if err != nil {
		_ = os.Remove(disk)
		_ = os.Remove(filepath.Join(spec.Dir, fileHarness))
		_ = os.Remove(filepath.Join(spec.Dir, fileMemory))
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	if err := m.handshake(ctx, spec.Env, atBoot, false); err != nil {
		console := m.consoleTail()
		_ = m.Destroy(context.Background())
		return nil, fmt.Errorf("boot %s: %w (console: %s)", spec.SessionID, err, console)
	}
	if err := m.markReady(); err != nil {
		_ = m.Destroy(context.Background())
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	b.log.Info("machine booted", "session_id", spec.SessionID, "pid", m.st.PID, "accel", m.st.Accel, "rootfs_id", rootID, "harness_id", h.ID)
	return m, nil
}

// handshakeMode says how the control message and the guest connection
// are ordered.
type handshakeMode int

const (
	// atBoot: init starts the daemon only after the first control message,
	// so the two go in turn.
	atBoot handshakeMode = iota
	// atRestore: the restored daemon runs already, so both go at once.
	atRestore
	// atRebind: the control message also restarts the daemon (new env and
	// hostname), and init answers once the new one runs: then connect, to
	// the daemon with the pid init gave.
	atRebind
)

func (h handshakeMode) String() string {
	return [...]string{"boot", "restore", "rebind"}[h]
}

// handshake sends init its control message (identity, env, clock, RNG
// seed) and connects to the guest daemon, ordered as mode says. remount
// (atRebind only) has init mount the harness disk again first.
func (m *machine) handshake(ctx context.Context, env map[string]string, mode handshakeMode, remount bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.b.cfg.ReadyTimeout)
	defer cancel()
	t0 := time.Now()
	var tControl time.Duration
	var mux *guestapi.Mux
	var err error
	if mode == atRestore {
		mux, tControl, err = m.controlAndConnect(ctx, env)
	} else {
		var rep initproto.Reply
		rep, err = m.control(ctx, env, mode == atRebind, remount)
		tControl = time.Since(t0)
		if err == nil && mode == atRebind && rep.GuestPID == 0 {
			err = fmt.Errorf("guest init did not restart the guest daemon (an init that predates rebinding): %w", vmm.ErrUnsupported)
		}
		if err == nil && remount && !rep.HarnessRemounted {
			err = fmt.Errorf("guest init did not remount the harness (an init that predates harness remounts): %w", vmm.ErrUnsupported)
		}
		if err == nil {
			mux, err = connectDaemon(ctx, m.guestSocket(), rep.GuestPID)
		}
	}
	if err != nil {
		return err
	}
	m.b.log.Debug("guest handshake", "session_id", m.st.SessionID, "mode", mode.String(),
		"control_ms", tControl.Milliseconds(), "total_ms", time.Since(t0).Milliseconds())
	m.setMux(mux)
	return nil
}

// controlAndConnect sends the control message and connects to the running
// daemon at once; it returns how long the control message took.
func (m *machine) controlAndConnect(ctx context.Context, env map[string]string) (*guestapi.Mux, time.Duration, error) {
	t0 := time.Now()
	var tControl time.Duration
	controlled := make(chan error, 1)
	go func() {
		_, err := m.control(ctx, env, false, false)
		tControl = time.Since(t0)
		controlled <- err
	}()
	mux, _, err := connectGuest(ctx, m.guestSocket())
	if cerr := <-controlled; cerr != nil {
		if mux != nil {
			mux.Close()
		}
		return nil, tControl, cerr
	}
	return mux, tControl, err
}

// control sends init one control message; restart asks it to restart the
// guest daemon, and the reply names the new one; remount asks it to mount
// the harness disk again before.
func (m *machine) control(ctx context.Context, env map[string]string, restart, remount bool) (initproto.Reply, error) {
	m.mu.Lock()
	m.ctlID++
	id := m.ctlID
	m.mu.Unlock()
	c := newControl(id, m.st.Hostname, env)
	if m.st.Tap {
		c.Nameserver = initproto.DefaultParams().Gateway // the resolver's DNS lands from any address
	}
	c.RestartGuest = restart
	c.RemountHarness = remount
	return sendControl(ctx, m.path(fileCtl), c)
}

func (m *machine) consoleTail() string {
	b, _ := os.ReadFile(m.path(fileSerLog))
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	return s
}
