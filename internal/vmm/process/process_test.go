package process_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/process"
	"github.com/engrams/engrams/internal/vmm/vmmtest"
)

// guestBinary is the engrams-guest built once for this package's tests.
var guestBinary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
		return 1
	}
	guestBinary = filepath.Join(dir, "engrams-guest")
	build := exec.Command("go", "build", "-o", guestBinary, "./cmd/engrams-guest")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build engrams-guest: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

func TestConformance(t *testing.T) {
	t.Parallel()
	vmmtest.Run(t, vmmtest.Harness{
		New: func(t *testing.T) vmm.Backend {
			return process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
		},
		Timeout: 30 * time.Second,
	})
}

// TestConformanceBusybox runs the suite with only busybox applets on PATH,
// as in the busybox roots of VM guests.
func TestConformanceBusybox(t *testing.T) {
	t.Parallel()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox binary")
	}
	bin := t.TempDir()
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if err := os.Symlink(busybox, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	vmmtest.Run(t, vmmtest.Harness{
		New: func(t *testing.T) vmm.Backend {
			return process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
		},
		Spec: func(t *testing.T) vmm.Spec {
			dir, err := os.MkdirTemp("", "vmmtest-bb-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return vmm.Spec{
				SessionID: "bb-" + filepath.Base(dir),
				Dir:       dir,
				Env:       map[string]string{"PATH": bin, "VMMTEST_SPEC_ENV": "busybox"},
			}
		},
		Timeout: 30 * time.Second,
	})
}
