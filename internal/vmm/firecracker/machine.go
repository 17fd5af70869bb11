package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// Names inside a machine's workdir: its Dir without the jailer, the jail
// root with it. Firecracker runs with the workdir as its working directory
// and is given these relative paths, so a snapshot's recorded drive and
// vsock paths resolve again in any other workdir (with or without jail).
const (
	fileAPI     = "api.sock"
	fileVsock   = "v.sock"
	fileLog     = "firecracker.log"     // FIFO
	fileMetrics = "firecracker.metrics" // FIFO
	fileOut     = "firecracker.out"     // stdout/stderr without the jailer
	filePID     = "firecracker.pid"     // written by the jailer
	fileRoot    = "root.ext4"
	fileBundle  = "bundle.img"
	fileKernel  = "vmlinux"
	fileInitrd  = "initrd.img"
	fileState   = "snapshot.state"
	fileMem     = "snapshot.mem"
	fileUffd    = "uffd.sock"
	fileMachine = "machine.json" // in Dir
)

// state is what machine.json holds: vmm.Info plus what Recover, Snapshot
// and Destroy need.
type state struct {
	vmm.Info
	Workdir    string `json:"workdir"`
	APISocket  string `json:"api_socket"`
	Jailed     bool   `json:"jailed"`
	JailID     string `json:"jail_id,omitempty"`
	ChrootDir  string `json:"chroot_dir,omitempty"` // removed on Destroy
	Cgroup     string `json:"cgroup,omitempty"`     // created by the jailer, removed on Destroy
	MemoryMiB  int    `json:"memory_mib"`
	VCPUs      int    `json:"vcpus"`
	Hostname   string `json:"hostname"`
	BaseMemory string `json:"base_memory,omitempty"` // full memory file a Diff snapshot builds on
	Uffd       bool   `json:"uffd,omitempty"`        // memory is served by this host agent's UffdServer
}

type machine struct {
	b    *Backend
	api  *apiClient
	done chan struct{}

	mu        sync.Mutex
	st        state
	logs      *drain
	metrics   *drain
	uffdStop  func() error
	ctlID     uint64
	destroyed bool
}

func (m *machine) Info() vmm.Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Info
}

func (m *machine) Done() <-chan struct{} { return m.done }

func (m *machine) work(name string) string { return filepath.Join(m.st.Workdir, name) }

func (m *machine) vsockPath() string { return m.work(fileVsock) }

// Dial opens a new vsock stream to the guest daemon.
func (m *machine) Dial(ctx context.Context) (net.Conn, error) {
	m.mu.Lock()
	destroyed := m.destroyed
	m.mu.Unlock()
	if destroyed {
		return nil, fmt.Errorf("dial guest %s: machine destroyed", m.st.SessionID)
	}
	conn, err := dialVsock(ctx, m.vsockPath(), m.b.cfg.GuestPort)
	if err != nil {
		return nil, fmt.Errorf("dial guest %s: %w", m.st.SessionID, err)
	}
	return conn, nil
}

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
	// Firecracker: 1..32 vCPUs; with SMT off any count is allowed.
	if spec.MemoryMiB < 64 || spec.VCPUs < 1 || spec.VCPUs > 32 {
		return spec, fmt.Errorf("bad machine size: %d MiB, %d vCPUs", spec.MemoryMiB, spec.VCPUs)
	}
	if spec.RootFS != nil {
		// Each machine gets a full copy of its root disk (no copy-on-write
		// layer), which a many-GiB caller image makes impractical.
		return spec, fmt.Errorf("root filesystem %q: the firecracker backend boots only its configured root disk: %w",
			spec.RootFS.ID, vmm.ErrUnsupported)
	}
	if spec.Harness != nil {
		return spec, fmt.Errorf("harness %q: the firecracker backend attaches no harness disk: %w",
			spec.Harness.ID, vmm.ErrUnsupported)
	}
	if spec.Network != nil {
		// Firecracker opens its TAP by name in its own namespace (the
		// jailer's --netns), not from an inherited fd: not built yet.
		return spec, fmt.Errorf("network: the firecracker backend takes no caller's TAP device yet: %w", vmm.ErrUnsupported)
	}
	return spec, nil
}

// newMachine lays out the workdir (the jail when jailed) for spec.
func (b *Backend) newMachine(spec vmm.Spec) (*machine, error) {
	st := state{
		Info:      vmm.Info{SessionID: spec.SessionID, Backend: "firecracker", Dir: spec.Dir, Created: time.Now().UTC()},
		Workdir:   spec.Dir,
		MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Hostname: spec.Hostname,
	}
	if b.cfg.UseJailer {
		st.Jailed = true
		st.JailID = jailID(spec.SessionID)
		st.ChrootDir = chrootDir(b.cfg, st.JailID)
		st.Workdir = filepath.Join(st.ChrootDir, "root")
		if b.cfg.CgroupVersion == 2 {
			st.Cgroup = filepath.Join("/sys/fs/cgroup", filepath.Base(b.cfg.FirecrackerBinary), st.JailID)
		}
		if err := os.MkdirAll(st.Workdir, 0o750); err != nil {
			return nil, err
		}
		if err := os.Chown(st.Workdir, b.cfg.UID, b.cfg.GID); err != nil {
			return nil, fmt.Errorf("chown jail root: %w", err)
		}
	}
	st.APISocket = filepath.Join(st.Workdir, fileAPI)
	st.Socket = filepath.Join(st.Workdir, fileVsock)
	if len(st.Socket) >= 108 || len(st.APISocket) >= 108 {
		return nil, fmt.Errorf("workdir %s too long for unix socket paths", st.Workdir)
	}
	return &machine{b: b, st: st, done: make(chan struct{}), ctlID: randomID()}, nil
}

// owner is the uid/gid files Firecracker writes must belong to (-1: leave).
func (b *Backend) owner() (int, int) {
	if b.cfg.UseJailer {
		return b.cfg.UID, b.cfg.GID
	}
	return -1, -1
}

// prepare stages the bundle (and, jailed, kernel and initrd) and makes the
// log and metrics FIFOs. The root disk is placed by the caller.
func (m *machine) prepare(withBoot bool) error {
	jailed := m.st.Jailed
	if err := stage(m.b.cfg.BundleDisk, m.work(fileBundle), jailed); err != nil {
		return err
	}
	if withBoot && jailed {
		if err := stage(m.b.cfg.Kernel, m.work(fileKernel), true); err != nil {
			return err
		}
		if err := stage(m.b.cfg.Initrd, m.work(fileInitrd), true); err != nil {
			return err
		}
	}
	uid, gid := m.b.owner()
	if uid >= 0 {
		if err := os.Chown(m.work(fileRoot), uid, gid); err != nil {
			return fmt.Errorf("chown root disk: %w", err)
		}
	}
	for _, f := range []string{fileLog, fileMetrics} {
		if err := makeFIFO(m.work(f), uid, gid); err != nil {
			return err
		}
	}
	for _, f := range []string{fileAPI, fileVsock} {
		_ = os.Remove(m.work(f))
	}
	var err error
	if m.logs, err = startDrain(m.work(fileLog), m.b.cfg.LogMax); err != nil {
		return err
	}
	m.metrics, err = startDrain(m.work(fileMetrics), 16<<10)
	return err
}

// bootPaths are the kernel and initrd paths Firecracker opens.
func (m *machine) bootPaths() (string, string) {
	if m.st.Jailed {
		return fileKernel, fileInitrd
	}
	return m.b.cfg.Kernel, m.b.cfg.Initrd
}

// launch starts Firecracker (directly or through the jailer), records its
// pid and start time, persists machine.json and waits for the API socket.
func (m *machine) launch(ctx context.Context) error {
	fcArgs := []string{"--api-sock", fileAPI}
	ls := LaunchSpec{APISocket: m.st.APISocket, Workdir: m.st.Workdir, Jailed: m.st.Jailed, Dir: m.st.Workdir}
	if m.st.Jailed {
		ls.Path = m.b.cfg.JailerBinary
		ls.Args = jailerArgs(m.b.cfg, m.st.JailID, m.cgroupArgs(), fcArgs)
	} else {
		ls.Path, ls.Args, ls.Setsid = m.b.cfg.FirecrackerBinary, append(fcArgs, "--id", jailID(m.st.SessionID)), true
		ls.Output = m.work(fileOut)
	}
	p, err := m.b.launch.Launch(ctx, ls)
	if err != nil {
		return err
	}
	pid := p.PID()
	if m.st.Jailed {
		if pid, err = m.jailedPID(ctx, p); err != nil {
			return err
		}
	}
	start, err := vmproc.StartTime(pid)
	if err != nil {
		return fmt.Errorf("firecracker pid %d: %w", pid, err)
	}
	m.mu.Lock()
	m.st.PID, m.st.StartTime = pid, start
	m.mu.Unlock()
	vmproc.WatchExit(pid, start, m.done)
	if err := m.writeState(); err != nil {
		return err
	}
	m.api = newAPIClient(m.st.APISocket)
	if _, err := m.api.waitAPI(ctx, m.done); err != nil {
		return fmt.Errorf("%w%s", err, m.logTail())
	}
	return nil
}

// cgroupArgs puts a jailed Firecracker in its own cgroup v2 with memory
// and CPU limits (guest RAM plus VMM overhead).
func (m *machine) cgroupArgs() []string {
	if m.st.Cgroup == "" {
		return nil
	}
	mem := int64(m.st.MemoryMiB+256) << 20
	return []string{
		"--cgroup", "memory.max=" + strconv.FormatInt(mem, 10),
		"--cgroup", "cpu.max=" + strconv.Itoa(m.st.VCPUs*100000) + " 100000",
	}
}

// jailedPID waits for the daemonizing jailer to exit and reads the pid of
// the Firecracker it left behind from <jail root>/firecracker.pid.
func (m *machine) jailedPID(ctx context.Context, p Process) (int, error) {
	select {
	case <-p.Exited():
	case <-ctx.Done():
		return 0, fmt.Errorf("jailer did not daemonize: %w", ctx.Err())
	}
	pidFile := m.work(filepath.Base(m.b.cfg.FirecrackerBinary) + ".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("jailer: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("jailer: bad pid file %s: %q", pidFile, b)
	}
	return pid, nil
}

func (m *machine) logTail() string {
	s := strings.TrimSpace(m.logs.tail())
	if s == "" {
		if b, err := os.ReadFile(m.work(fileOut)); err == nil {
			s = strings.TrimSpace(string(b))
		}
	}
	if len(s) > 800 {
		s = s[len(s)-800:]
	}
	if s == "" {
		return ""
	}
	return " (firecracker log: " + s + ")"
}

func (m *machine) writeState() error {
	m.mu.Lock()
	data, err := json.MarshalIndent(m.st, "", "  ")
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	p := filepath.Join(m.st.Dir, fileMachine)
	if err := os.WriteFile(p+".tmp", data, 0o644); err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("write machine state: %w", err)
	}
	return nil
}

// Boot starts a machine from the configured images and returns once its
// guest daemon answers.
func (b *Backend) Boot(ctx context.Context, spec vmm.Spec) (vmm.Machine, error) {
	m, err := b.boot(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("boot %s: %w", spec.SessionID, err)
	}
	b.log.Info("machine booted", "session_id", spec.SessionID, "pid", m.st.PID, "jailed", m.st.Jailed)
	return m, nil
}

func (b *Backend) boot(ctx context.Context, spec vmm.Spec) (*machine, error) {
	spec, err := normalize(spec)
	if err != nil {
		return nil, err
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
	if err := vmimage.CloneFile(b.cfg.RootDisk, m.work(fileRoot)); err != nil {
		return fail(err)
	}
	if err := m.prepare(true); err != nil {
		return fail(err)
	}
	if err := m.launch(ctx); err != nil {
		return fail(err)
	}
	if err := m.configure(ctx); err != nil {
		return fail(err)
	}
	if err := m.handshake(ctx, spec.Env, false); err != nil {
		return fail(err)
	}
	return m, nil
}

// apiCall is one PUT.
type apiCall struct {
	path string
	body any
}

// configure sends the pre-boot configuration, then InstanceStart.
func (m *machine) configure(ctx context.Context) error {
	cfg := m.b.cfg
	kernel, initrd := m.bootPaths()
	calls := []apiCall{
		{"/logger", Logger{LogPath: fileLog, Level: "Warning", ShowLevel: true}},
		{"/metrics", Metrics{MetricsPath: fileMetrics}},
		{"/machine-config", MachineConfig{VCPUCount: m.st.VCPUs, MemSizeMiB: m.st.MemoryMiB, SMT: false, TrackDirtyPages: cfg.DiffSnapshots}},
		{"/boot-source", BootSource{KernelImagePath: kernel, InitrdPath: initrd, BootArgs: m.b.kernelCmdline(m.st.Hostname)}},
		{"/drives/root", Drive{DriveID: "root", PathOnHost: fileRoot, IsRootDevice: false, IsReadOnly: false, CacheType: "Unsafe"}},
		{"/drives/bundle", Drive{DriveID: "bundle", PathOnHost: fileBundle, IsRootDevice: false, IsReadOnly: true}},
	}
	if cfg.TapDevice != "" {
		calls = append(calls, apiCall{"/network-interfaces/eth0", NetworkInterface{IfaceID: "eth0", HostDevName: cfg.TapDevice, GuestMAC: cfg.GuestMAC}})
	}
	calls = append(calls,
		apiCall{"/vsock", Vsock{GuestCID: cfg.GuestCID, UDSPath: fileVsock}},
		apiCall{"/actions", Action{ActionType: actionInstanceStart}},
	)
	for _, c := range calls {
		if err := m.api.put(ctx, c.path, c.body); err != nil {
			return err
		}
	}
	return nil
}
