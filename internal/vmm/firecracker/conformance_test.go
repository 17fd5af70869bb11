package firecracker

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
	"github.com/engrams/engrams/internal/vmm/vmmtest"
)

// TestConformance runs the shared backend suite against real Firecracker.
// It skips (also under CI: no CI runner can install Firecracker or offer
// real KVM) when Probe fails. ENGRAMS_FIRECRACKER names the binary and
// ENGRAMS_FC_KERNEL a bzImage whose config Firecracker can boot.
func TestConformance(t *testing.T) {
	cfg := Config{FirecrackerBinary: os.Getenv("ENGRAMS_FIRECRACKER")}
	if ok, reason := Probe(cfg); !ok {
		t.Skip("firecracker backend not runnable here: " + reason)
	}
	im := buildImages(t)
	cfg.Kernel, cfg.Initrd, cfg.RootDisk, cfg.BundleDisk = im.Kernel, im.Initramfs, im.RootFS, im.Bundle
	cfg.ReadyTimeout = time.Minute
	vmmtest.Run(t, vmmtest.Harness{
		New: func(t *testing.T) vmm.Backend {
			b, err := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Timeout: 2 * time.Minute,
	})
}

// buildImages builds engrams-init, engrams-guest and the boot images with
// the virtio vsock drivers added to the initramfs.
func buildImages(t *testing.T) vmimage.Images {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache := filepath.Join(os.TempDir(), "engrams-firecracker-test")
	bin := filepath.Join(cache, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"engrams-init", "engrams-guest"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w",
			"-o", filepath.Join(bin, name), "github.com/engrams/engrams/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v: %s", name, err, out)
		}
	}
	mods := slices.Concat(vmimage.DefaultModules, []string{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"})
	b, err := vmimage.New(vmimage.Config{
		CacheDir: cache, InitBinary: filepath.Join(bin, "engrams-init"), RootSizeMiB: 512,
		KernelImage: os.Getenv("ENGRAMS_FC_KERNEL"), Modules: mods,
	}, vmimage.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	im, err := b.Build(ctx, []vmimage.BundleFile{{Name: "engrams-guest", Source: filepath.Join(bin, "engrams-guest"), Mode: 0o755}})
	if err != nil {
		t.Fatalf("build images: %v", err)
	}
	return im
}
