package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// Files inside a machine's Spec.Dir.
const (
	InfoFile   = "machine.json" // vmm.Info, for Recover
	SocketFile = "guest.sock"   // the guest daemon's Unix socket
	LogFile    = "guest.log"    // the guest daemon's log
	RootDir    = "root"         // the guest's working directory: its "disk"
	StateDir   = ".engrams"     // the guest daemon's state, inside RootDir (so snapshots keep it)
	diskRole   = "disk"
	diskFile   = "disk.tar" // a snapshot's disk: a tar of RootDir
	name       = "process"
)

// markerEnv tags every process of a machine (the daemon and, by
// inheritance, what it runs) so Destroy finds them all, even orphans.
const markerEnv = "ENGRAMS_PROCESS_MACHINE"

// Config configures the backend.
type Config struct {
	GuestBinary string // path of engrams-guest
}

// Deps are the backend's collaborators.
type Deps struct {
	Logger *slog.Logger // nil: discard
}

// Backend runs guest daemons as host processes.
type Backend struct {
	cfg Config
	log *slog.Logger
}

var _ vmm.Backend = (*Backend)(nil)

// New returns the backend and warns loudly that it isolates nothing.
func New(cfg Config, deps Deps) *Backend {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("backend", name)
	log.Warn("process vmm backend: NO ISOLATION. Guest commands run as host processes with the host agent's user and " +
		"see the host's files and network. Use it for development only.")
	return &Backend{cfg: cfg, log: log}
}

// Capabilities says what this backend does (and does not).
func (b *Backend) Capabilities() vmm.Capabilities {
	return vmm.Capabilities{
		Name:           name,
		Version:        "1",
		Acceleration:   "none",
		Isolation:      false,
		SnapshotMemory: false,
		SnapshotDisk:   true,
		Reason: "process backend: development only, gives NO isolation (guest commands are plain host processes " +
			"with the host agent's privileges); snapshots archive the guest's directory (a tar), not its memory or processes",
	}
}

// Boot starts a guest daemon in spec.Dir and returns once it answers.
func (b *Backend) Boot(ctx context.Context, spec vmm.Spec) (vmm.Machine, error) {
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	if err := os.MkdirAll(filepath.Join(spec.Dir, RootDir), 0o755); err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	return b.start(ctx, spec)
}

// Restore boots a new machine whose root directory is unpacked from the
// snapshot's disk archive, wherever that file is. Every restore starts a
// new guest daemon with spec.Env, so Rebind changes nothing here.
func (b *Backend) Restore(ctx context.Context, spec vmm.Spec, snap vmm.Snapshot) (vmm.Machine, error) {
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("restore %s: %w", spec.SessionID, err)
	}
	disk := snap.Files[diskRole]
	if snap.Backend != name || disk == "" {
		return nil, fmt.Errorf("restore %s: snapshot from backend %q without a disk: %w", spec.SessionID, snap.Backend, vmm.ErrUnsupported)
	}
	root := filepath.Join(spec.Dir, RootDir)
	if entries, err := os.ReadDir(root); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("restore %s: %s is not empty", spec.SessionID, root)
	}
	if err := extractTar(disk, root); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("restore %s: unpack disk: %w", spec.SessionID, err)
	}
	return b.start(ctx, spec)
}

func checkSpec(spec vmm.Spec) error {
	if spec.Dir == "" || !filepath.IsAbs(spec.Dir) {
		return fmt.Errorf("spec dir must be an absolute path, got %q", spec.Dir)
	}
	if n := len(filepath.Join(spec.Dir, SocketFile)); n > 107 {
		return fmt.Errorf("spec dir %q too long for a Unix socket path (%d bytes > 107)", spec.Dir, n)
	}
	if spec.RootFS != nil {
		return fmt.Errorf("root filesystem %q: the process backend runs guest commands on the host's file system: %w",
			spec.RootFS.ID, vmm.ErrUnsupported)
	}
	if spec.Harness != nil {
		return fmt.Errorf("harness %q: the process backend has no guest to attach a harness disk to: %w",
			spec.Harness.ID, vmm.ErrUnsupported)
	}
	if spec.Network != nil {
		return fmt.Errorf("network: the process backend has no guest NIC to attach a TAP device to: %w", vmm.ErrUnsupported)
	}
	return nil
}

func (b *Backend) start(ctx context.Context, spec vmm.Spec) (vmm.Machine, error) {
	if b.cfg.GuestBinary == "" {
		return nil, errors.New("process backend: Config.GuestBinary is empty")
	}
	if _, err := os.Stat(b.cfg.GuestBinary); err != nil {
		return nil, fmt.Errorf("process backend: guest binary: %w", err)
	}
	sock := filepath.Join(spec.Dir, SocketFile)
	_ = os.Remove(sock)
	root := filepath.Join(spec.Dir, RootDir)
	cmd := exec.Command(b.cfg.GuestBinary,
		"--listen", "unix:"+sock,
		"--workdir", root,
		"--state-dir", filepath.Join(root, StateDir),
		"--log-file", filepath.Join(spec.Dir, LogFile))
	cmd.Dir = root
	cmd.Env = guestEnv(spec, root)
	// Its own session: a kill -9 of the host agent leaves it running, and
	// Recover reattaches.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("boot %s: start guest daemon: %w", spec.SessionID, err)
	}
	m := &machine{b: b, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(m.done)
	}()
	st, err := startTime(cmd.Process.Pid)
	if err != nil {
		st = 0 // exited already; the readiness wait reports it
	}
	m.info = vmm.Info{
		SessionID: spec.SessionID,
		Backend:   name,
		PID:       cmd.Process.Pid,
		StartTime: st,
		Dir:       spec.Dir,
		Socket:    sock,
		Created:   time.Now().UTC(),
	}
	if err := writeInfo(m.info); err != nil {
		_ = m.Destroy(context.Background())
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	if err := m.waitReady(ctx); err != nil {
		_ = m.Destroy(context.Background())
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	b.log.Info("machine booted", "session_id", spec.SessionID, "pid", m.info.PID, "dir", spec.Dir)
	return m, nil
}

func guestEnv(spec vmm.Spec, root string) []string {
	env := map[string]string{
		"PATH":    os.Getenv("PATH"),
		"HOME":    root,
		"LANG":    "C.UTF-8",
		markerEnv: spec.Dir,
	}
	if env["PATH"] == "" {
		env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	for k, v := range spec.Env {
		if k != markerEnv {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func writeInfo(info vmm.Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(info.Dir, InfoFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", InfoFile, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write %s: %w", InfoFile, err)
	}
	return nil
}

// Recover reattaches to a daemon a previous Backend value started in dir.
func (b *Backend) Recover(ctx context.Context, dir string) (vmm.Machine, error) {
	raw, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if errors.Is(err, os.ErrNotExist) {
		b.cleanupLeftovers(vmm.Info{Dir: dir, Socket: filepath.Join(dir, SocketFile)})
		return nil, fmt.Errorf("recover %s: no %s: %w", dir, InfoFile, vmm.ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", dir, err)
	}
	var info vmm.Info
	if err := json.Unmarshal(raw, &info); err != nil || info.Backend != name || info.PID <= 0 {
		b.cleanupLeftovers(vmm.Info{Dir: dir, Socket: filepath.Join(dir, SocketFile)})
		return nil, fmt.Errorf("recover %s: unusable %s (%v): %w", dir, InfoFile, err, vmm.ErrGone)
	}
	info.Dir = dir
	if !alive(info.PID, info.StartTime) {
		b.cleanupLeftovers(info)
		return nil, fmt.Errorf("recover %s: guest daemon pid %d is gone: %w", dir, info.PID, vmm.ErrGone)
	}
	m := &machine{b: b, info: info, done: make(chan struct{}), polled: true}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if stopped(info.PID) {
		// Paused (Pause or Snapshot) by the previous host agent: it stays
		// paused and cannot answer until Resume.
		go m.poll()
		b.log.Info("paused machine recovered", "session_id", info.SessionID, "pid", info.PID, "dir", dir)
		return m, nil
	}
	if _, err := guestapi.NewClient(m.Dial).Ready(rctx); err != nil {
		b.cleanupLeftovers(info)
		return nil, fmt.Errorf("recover %s: guest daemon does not answer (%v): %w", dir, err, vmm.ErrGone)
	}
	go m.poll()
	b.log.Info("machine recovered", "session_id", info.SessionID, "pid", info.PID, "dir", dir)
	return m, nil
}

// cleanupLeftovers kills whatever of a machine still runs and removes its
// socket and info file.
func (b *Backend) cleanupLeftovers(info vmm.Info) {
	killMachine(info)
	if info.Socket != "" {
		_ = os.Remove(info.Socket)
	}
	_ = os.Remove(filepath.Join(info.Dir, InfoFile))
}

// machine is one running guest daemon.
type machine struct {
	b      *Backend
	info   vmm.Info
	done   chan struct{}
	polled bool // not our child: exit detected by polling

	mu        sync.Mutex
	destroyed bool
}

func (m *machine) Info() vmm.Info        { return m.info }
func (m *machine) Done() <-chan struct{} { return m.done }

// Pause stops (SIGSTOP) the daemon and every process of the machine.
func (m *machine) Pause(ctx context.Context) error {
	if err := stopMachine(ctx, m.info); err != nil {
		return fmt.Errorf("pause %s: %w", m.info.SessionID, err)
	}
	return nil
}

// Resume continues (SIGCONT) every process of a machine paused by Pause or
// Snapshot.
func (m *machine) Resume(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("resume %s: %w", m.info.SessionID, err)
	}
	signalMachine(m.info, syscall.SIGCONT)
	return nil
}

func (m *machine) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", m.info.Socket)
	if err != nil {
		return nil, fmt.Errorf("dial guest %s: %w", m.info.SessionID, err)
	}
	return c, nil
}

func (m *machine) poll() {
	defer close(m.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		if !alive(m.info.PID, m.info.StartTime) {
			return
		}
	}
}

func (m *machine) waitReady(ctx context.Context) error {
	c := guestapi.NewClient(m.Dial)
	defer c.Close()
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ready(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("guest daemon exited while booting: %s", logTail(filepath.Join(m.info.Dir, LogFile)))
		case <-ctx.Done():
			return fmt.Errorf("wait for guest daemon (last error: %v): %w", err, vmm.ErrGuestTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func logTail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "no log: " + err.Error()
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// Snapshot pauses the machine (every process stopped, so no file is
// caught half-written) and archives its root directory into dir as one
// tar file; memory and processes are not kept. The machine stays paused:
// Resume or Destroy it.
func (m *machine) Snapshot(ctx context.Context, dir string) (vmm.Snapshot, error) {
	if err := m.Pause(ctx); err != nil {
		return vmm.Snapshot{}, fmt.Errorf("snapshot %s: %w", m.info.SessionID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return vmm.Snapshot{}, fmt.Errorf("snapshot %s: %w", m.info.SessionID, err)
	}
	disk := filepath.Join(dir, diskFile)
	if err := writeTar(filepath.Join(m.info.Dir, RootDir), disk); err != nil {
		return vmm.Snapshot{}, fmt.Errorf("snapshot %s: archive disk: %w", m.info.SessionID, err)
	}
	return vmm.Snapshot{Backend: name, Files: map[string]string{diskRole: disk}, Taken: time.Now().UTC()}, nil
}

// Destroy stops the daemon and everything it started, then removes the
// socket, the info file, the log and root/. Snapshot directories stay.
func (m *machine) Destroy(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.destroyed {
		if alive(m.info.PID, m.info.StartTime) {
			_ = syscall.Kill(-m.info.PID, syscall.SIGTERM) // the daemon ends its commands
			signalMachine(m.info, syscall.SIGCONT)         // a paused machine handles it too
			t := time.NewTimer(2 * time.Second)
			select {
			case <-m.done:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		killMachine(m.info)
	}
	select {
	case <-m.done:
	case <-ctx.Done():
		return fmt.Errorf("destroy %s: wait for exit: %w", m.info.SessionID, ctx.Err())
	}
	if !m.destroyed {
		m.destroyed = true
		m.b.log.Info("machine destroyed", "session_id", m.info.SessionID, "pid", m.info.PID)
	}
	var errs []error
	for _, p := range []string{m.info.Socket, filepath.Join(m.info.Dir, InfoFile), filepath.Join(m.info.Dir, LogFile)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(m.info.Dir, RootDir)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy %s: %w", m.info.SessionID, err)
	}
	return nil
}
