package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/firecracker"
	"github.com/engrams/engrams/internal/vmm/process"
	"github.com/engrams/engrams/internal/vmm/qemu"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// pickBackend chooses the vmm backend: the named one, or for "auto" the
// best this machine can run (firecracker > qemu with KVM > qemu with TCG >
// process).
func pickBackend(ctx context.Context, name, dataDir string, log *slog.Logger) (backendChoice, error) {
	var ch backendChoice
	switch name {
	case "firecracker", "qemu", "process", "auto":
	default:
		return ch, fmt.Errorf("--backend %q: use auto, firecracker, qemu or process", name)
	}
	if name == "firecracker" || name == "auto" {
		be, err := newFirecracker(ctx, dataDir, log)
		if err == nil {
			caps := be.Capabilities()
			ch.backend = be
			ch.considered = append(ch.considered, facts(caps, true, caps.Reason))
			return ch, nil
		}
		ch.considered = append(ch.considered, domain.BackendFacts{Name: "firecracker", Usable: false, Reason: err.Error()})
		if name == "firecracker" {
			return ch, fmt.Errorf("firecracker backend: %w", err)
		}
		log.Info("firecracker backend unavailable", "reason", err)
	}
	if name == "qemu" || name == "auto" {
		be, err := newQEMU(ctx, dataDir, log)
		if err == nil {
			caps := be.Capabilities()
			ch.backend = be
			ch.considered = append(ch.considered, facts(caps, true, caps.Reason))
			return ch, nil
		}
		ch.considered = append(ch.considered, domain.BackendFacts{Name: "qemu", Usable: false, Reason: err.Error()})
		if name == "qemu" {
			return ch, fmt.Errorf("qemu backend: %w", err)
		}
		log.Warn("qemu backend unavailable; falling back to the process backend, which gives NO isolation", "reason", err)
	}
	guest, err := siblingBinary("engrams-guest")
	if err != nil {
		return ch, err
	}
	be := process.New(process.Config{GuestBinary: guest}, process.Deps{Logger: log})
	ch.backend = be
	ch.considered = append(ch.considered, facts(be.Capabilities(), true, be.Capabilities().Reason))
	return ch, nil
}

func facts(c vmm.Capabilities, usable bool, reason string) domain.BackendFacts {
	return domain.BackendFacts{Name: c.Name, Version: c.Version, Acceleration: c.Acceleration, Isolation: c.Isolation, RootFS: c.RootFS, Harness: c.Harness, Usable: usable, Reason: reason}
}

// newFirecracker returns the firecracker backend when this machine can run
// it (binary present, usable KVM that is not kvm_pvm).
func newFirecracker(ctx context.Context, dataDir string, log *slog.Logger) (*firecracker.Backend, error) {
	cfg := firecracker.Config{}
	if ok, reason := firecracker.Probe(cfg); !ok {
		return nil, errors.New(reason)
	}
	vsock := []string{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"}
	im, err := buildImages(ctx, dataDir, slices.Concat(vmimage.DefaultModules, vsock), log)
	if err != nil {
		return nil, err
	}
	cfg.Kernel, cfg.Initrd, cfg.RootDisk, cfg.BundleDisk = im.Kernel, im.Initramfs, im.RootFS, im.Bundle
	return firecracker.New(cfg, firecracker.Deps{Logger: log})
}

// newQEMU builds (or finds cached) guest images and returns the backend.
func newQEMU(ctx context.Context, dataDir string, log *slog.Logger) (*qemu.Backend, error) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, errors.New("qemu-system-x86_64 is not installed (run scripts/install-deps.sh)")
	}
	im, err := buildImages(ctx, dataDir, nil, log)
	if err != nil {
		return nil, err
	}
	return qemu.New(qemu.Config{DataDir: dataDir, Images: im, Network: true}, qemu.Deps{Logger: log, Checkpoint: testCheckpoint(log)})
}

// buildImages builds (or finds cached) the kernel, initramfs, root and
// bundle images; modules nil means the default set.
func buildImages(ctx context.Context, dataDir string, modules []string, log *slog.Logger) (vmimage.Images, error) {
	initBin, err := siblingBinary("engrams-init")
	if err != nil {
		return vmimage.Images{}, err
	}
	guest, err := siblingBinary("engrams-guest")
	if err != nil {
		return vmimage.Images{}, err
	}
	b, err := vmimage.New(vmimage.Config{CacheDir: filepath.Join(dataDir, "images"), InitBinary: initBin, Modules: modules}, vmimage.Deps{Logger: log})
	if err != nil {
		return vmimage.Images{}, fmt.Errorf("guest images: %w", err)
	}
	im, err := b.Build(ctx, []vmimage.BundleFile{{Name: "engrams-guest", Source: guest, Mode: 0o755}})
	if err != nil {
		return vmimage.Images{}, fmt.Errorf("build guest images: %w", err)
	}
	return im, nil
}
