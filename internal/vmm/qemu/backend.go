package qemu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// Config configures the backend. Images are built beforehand (vmimage).
type Config struct {
	QEMU    string         // default "qemu-system-x86_64"
	QemuImg string         // default "qemu-img"
	Accel   string         // "auto" (default), "kvm" or "tcg"
	DataDir string         // host data directory: caches the KVM probe result; required
	Images  vmimage.Images // kernel, initramfs, root base and bundle paths
	CPUInfo string         // default /proc/cpuinfo (for tsc_early_khz)
	// Network gives every machine a NIC: on restricted user networking
	// (the guest reaches nothing), or on the TAP of Spec.Network, which
	// gives one either way.
	Network      bool
	SerialLogMax int64         // bytes kept per console log file; default 1 MiB
	ReadyTimeout time.Duration // boot/restore until the guest answers; default 90 s
	OverheadMiB  int           // cgroup memory.max above guest RAM; default 512
	CgroupParent string        // default /sys/fs/cgroup/engrams
	NoCgroup     bool          // do not use cgroups even when available
}

// Deps are injected collaborators.
type Deps struct {
	Logger *slog.Logger
	// Checkpoint, when set, is called at named points so fault tests can
	// stop the host agent exactly there: "qemu-spawned" and
	// "qemu-spawned-restore" (QEMU runs, its pid is not recorded yet) and
	// "qemu-paused" (a snapshot stopped the VM, its state is not written
	// yet). nil: none.
	Checkpoint func(ctx context.Context, point string)
}

// Backend runs QEMU microvm machines.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	version string
	accel   string
	reason  string
	tscKHz  int64
	cgroup  bool
	hashes  hashCache // image content hashes, for portable snapshots

	checkpoint func(ctx context.Context, point string) // Deps.Checkpoint
}

// New checks the host (QEMU version, acceleration, TSC frequency, cgroups)
// and returns the backend. Pick it in cmd/ only when New succeeds.
func New(cfg Config, deps Deps) (*Backend, error) {
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.QemuImg == "" {
		cfg.QemuImg = "qemu-img"
	}
	if cfg.Accel == "" {
		cfg.Accel = "auto"
	}
	if cfg.CPUInfo == "" {
		cfg.CPUInfo = "/proc/cpuinfo"
	}
	if cfg.SerialLogMax == 0 {
		cfg.SerialLogMax = 1 << 20
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.OverheadMiB == 0 {
		cfg.OverheadMiB = 512
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = cgroupRoot + "/engrams"
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("new qemu backend: DataDir is required")
	}
	im := cfg.Images
	for _, p := range []string{im.Kernel, im.Initramfs, im.RootFS, im.Bundle, im.Harness} {
		if p == "" {
			return nil, fmt.Errorf("new qemu backend: Images incomplete (kernel, initramfs, rootfs, bundle, harness placeholder): %+v", im)
		}
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if deps.Checkpoint == nil {
		deps.Checkpoint = func(context.Context, string) {}
	}
	b := &Backend{cfg: cfg, log: log, checkpoint: deps.Checkpoint}
	out, err := exec.Command(cfg.QEMU, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("new qemu backend: run %s --version: %w", cfg.QEMU, err)
	}
	b.version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if b.tscKHz, err = cpuKHz(cfg.CPUInfo); err != nil {
		log.Warn("no tsc_early_khz hint; microvm boots under TCG may hang", "err", err)
	}
	if !cfg.NoCgroup {
		var why string
		if b.cgroup, why = cgroupUsable(); !b.cgroup {
			log.Info("qemu processes will not get their own cgroup", "reason", why)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("new qemu backend: %w", err)
	}
	b.accel, b.reason = b.chooseAccel(context.Background())
	log.Info("qemu backend", "version", b.version, "accel", b.accel, "reason", b.reason)
	return b, nil
}

// Capabilities reports what this backend does on this host.
func (b *Backend) Capabilities() vmm.Capabilities {
	reason := b.reason
	if !b.cgroup {
		reason += "; no per-VM cgroup (cgroup v2 not writable)"
	}
	return vmm.Capabilities{
		Name: "qemu", Version: b.version, Acceleration: b.accel, Isolation: true,
		SnapshotMemory: true, SnapshotDisk: true, RootFS: true, Harness: true, Network: true, LazyMemory: true,
		Reason: reason,
	}
}
