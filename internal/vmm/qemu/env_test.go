package qemu

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/testutil"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// guestSlots limits the package to 2 concurrent guests (2-core hosts, TCG).
var guestSlots = make(chan struct{}, 2)

func acquireGuest(t testing.TB) {
	guestSlots <- struct{}{}
	t.Cleanup(func() { <-guestSlots })
}

var (
	imagesOnce sync.Once
	images     vmimage.Images
	imagesErr  error
	imagesSkip string
)

// testImages builds engrams-init and engrams-guest and the boot images
// (cached across runs in $TMPDIR/engrams-qemu-test), or skips with the
// reason (failing under CI=true) when QEMU or a kernel is missing.
func testImages(t testing.TB) vmimage.Images {
	t.Helper()
	imagesOnce.Do(func() {
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			imagesSkip = "qemu-system-x86_64 not installed (scripts/install-deps.sh)"
			return
		}
		if _, err := exec.LookPath("qemu-img"); err != nil {
			imagesSkip = "qemu-img not installed (scripts/install-deps.sh)"
			return
		}
		if m, _ := filepath.Glob("/boot/vmlinuz-*"); len(m) == 0 {
			imagesSkip = "no guest kernel in /boot (scripts/install-deps.sh installs linux-image-cloud-amd64)"
			return
		}
		images, imagesErr = buildTestImages()
	})
	if imagesSkip != "" {
		testutil.SkipOrFail(t, "%s", imagesSkip)
	}
	if imagesErr != nil {
		t.Fatalf("build test images: %v", imagesErr)
	}
	return images
}

func buildTestImages() (vmimage.Images, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache := filepath.Join(os.TempDir(), "engrams-qemu-test")
	bin := filepath.Join(cache, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return vmimage.Images{}, err
	}
	for _, name := range []string{"engrams-init", "engrams-guest"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w",
			"-o", filepath.Join(bin, name), "github.com/engrams/engrams/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return vmimage.Images{}, &buildError{name, err, string(out)}
		}
	}
	return buildImagesIn(ctx, cache, bin)
}

// buildImagesIn builds (or finds cached) boot images in cache from the
// engrams-init and engrams-guest binaries in bin.
func buildImagesIn(ctx context.Context, cache, bin string) (vmimage.Images, error) {
	b, err := vmimage.New(vmimage.Config{
		CacheDir: cache, InitBinary: filepath.Join(bin, "engrams-init"), RootSizeMiB: 512,
	}, vmimage.Deps{})
	if err != nil {
		return vmimage.Images{}, err
	}
	return b.Build(ctx, []vmimage.BundleFile{{Name: "engrams-guest", Source: filepath.Join(bin, "engrams-guest"), Mode: 0o755}})
}

type buildError struct {
	name string
	err  error
	out  string
}

func (e *buildError) Error() string {
	return "go build " + e.name + ": " + e.err.Error() + ": " + e.out
}

// newTestBackend returns a TCG backend over the test images.
func newTestBackend(t testing.TB) *Backend {
	t.Helper()
	return newBackendWith(t, testImages(t), t.TempDir())
}

// newBackendWith returns a TCG backend over im with its own data dir.
func newBackendWith(t testing.TB, im vmimage.Images, dataDir string) *Backend {
	t.Helper()
	b, err := New(Config{
		Accel: "auto", DataDir: dataDir, Images: im, Network: true,
		ReadyTimeout: 3 * time.Minute,
	}, Deps{Logger: testLogger()})
	if err != nil {
		t.Fatalf("new backend: %v", err)
	}
	return b
}

// testLogger logs warnings, or what ENGRAMS_TEST_LOG names (debug, info).
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("ENGRAMS_TEST_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
