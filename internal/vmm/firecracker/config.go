package firecracker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/vmm"
)

// Config configures the backend. Images are built beforehand (vmimage);
// Firecracker needs raw disk images and an uncompressed kernel.
type Config struct {
	FirecrackerBinary string // default "firecracker" (looked up in PATH)
	JailerBinary      string // required when UseJailer
	Kernel            string // uncompressed vmlinux
	Initrd            string // stage-1 init initramfs
	RootDisk          string // raw ext4 base image; each machine gets its own copy-on-write copy
	BundleDisk        string // raw read-only engrams bundle image
	KernelArgs        string // extra kernel command-line words
	GuestPort         uint32 // vsock port the guest daemon serves on; default 1024
	CtlPort           uint32 // vsock port of init's control channel; default GuestPort+1
	GuestCID          uint32 // default 3

	TapDevice string // host tap device; empty: no network interface
	GuestMAC  string // optional MAC for the tap interface
	GuestIP   string // guest address in CIDR form when TapDevice is set
	GatewayIP string

	UseJailer     bool   // launch through the jailer
	UID, GID      int    // the jailer switches to these
	ChrootBase    string // default /srv/jailer
	CgroupVersion int    // 1 or 2; default 2
	NetNS         string // network namespace handle for the jailer (optional)

	DiffSnapshots bool   // track dirty pages and take Diff snapshots after a first Full one
	MemBackend    string // "File" (default) or "Uffd" (needs Deps.Uffd)

	ReadyTimeout time.Duration // boot/restore until the guest answers; default 90 s
	StopGrace    time.Duration // SIGTERM to SIGKILL on Destroy; default 2 s
	LogMax       int           // bytes of Firecracker log kept in memory; default 64 KiB
}

// UffdServer serves guest memory page faults for the Uffd memory backend:
// it listens on socketPath, receives Firecracker's userfaultfd and memory
// mappings, and fills pages from memFile until ctx ends or Close.
type UffdServer interface {
	Start(ctx context.Context, socketPath, memFile string) (stop func() error, err error)
}

// Deps are injected collaborators.
type Deps struct {
	Logger   *slog.Logger
	Launcher Launcher   // default ExecLauncher
	Uffd     UffdServer // required when Config.MemBackend is "Uffd"
}

// Backend runs Firecracker microVMs.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	launch  Launcher
	uffd    UffdServer
	version string
}

func (c *Config) defaults() {
	if c.FirecrackerBinary == "" {
		c.FirecrackerBinary = "firecracker"
	}
	if c.GuestPort == 0 {
		c.GuestPort = 1024
	}
	if c.CtlPort == 0 {
		c.CtlPort = c.GuestPort + 1
	}
	if c.GuestCID == 0 {
		c.GuestCID = 3
	}
	if c.ChrootBase == "" {
		c.ChrootBase = "/srv/jailer"
	}
	if c.CgroupVersion == 0 {
		c.CgroupVersion = 2
	}
	if c.MemBackend == "" {
		c.MemBackend = memBackendFile
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 90 * time.Second
	}
	if c.StopGrace == 0 {
		c.StopGrace = 2 * time.Second
	}
	if c.LogMax == 0 {
		c.LogMax = 64 << 10
	}
}

func (c Config) validate(deps Deps) error {
	for name, p := range map[string]string{"Kernel": c.Kernel, "Initrd": c.Initrd, "RootDisk": c.RootDisk, "BundleDisk": c.BundleDisk} {
		if p == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	if c.UseJailer && c.JailerBinary == "" {
		return errors.New("JailerBinary is required with UseJailer")
	}
	if c.CgroupVersion != 1 && c.CgroupVersion != 2 {
		return fmt.Errorf("CgroupVersion %d: want 1 or 2", c.CgroupVersion)
	}
	switch c.MemBackend {
	case memBackendFile:
	case memBackendUffd:
		if deps.Uffd == nil {
			return errors.New("MemBackend Uffd needs Deps.Uffd")
		}
	default:
		return fmt.Errorf("MemBackend %q: want File or Uffd", c.MemBackend)
	}
	return nil
}

// New checks the configuration, reads `firecracker --version` and returns
// the backend. Pick it in cmd/ only when Probe passes.
func New(cfg Config, deps Deps) (*Backend, error) {
	cfg.defaults()
	if err := cfg.validate(deps); err != nil {
		return nil, fmt.Errorf("new firecracker backend: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	launch := deps.Launcher
	if launch == nil {
		launch = ExecLauncher{}
	}
	out, err := exec.Command(cfg.FirecrackerBinary, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("new firecracker backend: run %s --version: %w", cfg.FirecrackerBinary, err)
	}
	version := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	return &Backend{cfg: cfg, log: log, launch: launch, uffd: deps.Uffd, version: version}, nil
}

// Capabilities reports what this backend does.
func (b *Backend) Capabilities() vmm.Capabilities {
	reason := "firecracker with KVM"
	if b.cfg.UseJailer {
		reason += " under the jailer"
	}
	return vmm.Capabilities{
		Name: "firecracker", Version: b.version, Acceleration: "kvm", Isolation: true,
		SnapshotMemory: true, SnapshotDisk: true, Reason: reason,
	}
}

// Probe reports whether Firecracker can run here: the binary (and jailer)
// exists and /dev/kvm is usable real KVM, not the paravirtual kvm_pvm that
// cannot run stock guest kernels. reason says what is missing.
func Probe(cfg Config) (ok bool, reason string) {
	return probe(cfg, "/dev/kvm", "/sys/module/kvm_pvm")
}

func probe(cfg Config, kvm, pvm string) (bool, string) {
	cfg.defaults()
	if _, err := exec.LookPath(cfg.FirecrackerBinary); err != nil {
		return false, fmt.Sprintf("no firecracker binary: %v", err)
	}
	if cfg.UseJailer {
		if _, err := exec.LookPath(cfg.JailerBinary); err != nil {
			return false, fmt.Sprintf("no jailer binary: %v", err)
		}
	}
	f, err := os.OpenFile(kvm, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("%s not usable: %v", kvm, err)
	}
	f.Close()
	if _, err := os.Stat(pvm); err == nil {
		return false, "KVM here is kvm_pvm (" + pvm + " exists): it cannot run stock guest kernels"
	}
	return true, "firecracker and KVM available"
}

// Compile-time checks that the contract is implemented.
var (
	_ vmm.Backend = (*Backend)(nil)
	_ vmm.Machine = (*machine)(nil)
)
