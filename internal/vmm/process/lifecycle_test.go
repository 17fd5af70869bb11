package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/process"
)

func newSpec(t *testing.T) vmm.Spec {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return vmm.Spec{SessionID: "s-" + filepath.Base(dir), Dir: dir}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startLeftovers starts, in the machine, a detached background process and
// a terminal command still running; it returns their pids.
func startLeftovers(t *testing.T, m vmm.Machine) []int {
	t.Helper()
	ctx := ctxFor(t, 20*time.Second)
	c := guestapi.NewClient(m.Dial)
	t.Cleanup(c.Close)
	var out bytes.Buffer
	exit, err := c.Exec(ctx, guestapi.ExecStart{Argv: []string{"sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"}}, nil, &out, nil)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("start background: %+v %v", exit, err)
	}
	var bg int
	if _, err := fmt.Sscan(out.String(), &bg); err != nil {
		t.Fatalf("background pid %q: %v", out.String(), err)
	}
	p, err := c.Start(ctx, guestapi.ExecStart{Argv: []string{"sleep", "300"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return []int{bg, p.PID(), m.Info().PID}
}

func waitAllGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still running", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestDestroyKillsEverything(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	spec := newSpec(t)
	m, err := b.Boot(ctxFor(t, 20*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	pids := startLeftovers(t, m)
	if err := m.Destroy(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitAllGone(t, pids)
	for _, f := range []string{process.SocketFile, process.InfoFile, process.RootDir, process.LogFile} {
		if _, err := os.Lstat(filepath.Join(spec.Dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Destroy: %v", f, err)
		}
	}
}

func TestRecoverDeadMachineReapsLeftovers(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	spec := newSpec(t)
	m, err := b.Boot(ctxFor(t, 20*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	pids := startLeftovers(t, m)
	// The daemon dies hard: its commands stay behind.
	if err := syscall.Kill(m.Info().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	_, err = process.New(process.Config{GuestBinary: guestBinary}, process.Deps{}).Recover(ctxFor(t, 20*time.Second), spec.Dir)
	if !errors.Is(err, vmm.ErrGone) {
		t.Fatalf("Recover = %v, want ErrGone", err)
	}
	waitAllGone(t, pids)
	if _, err := os.Lstat(filepath.Join(spec.Dir, process.SocketFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left: %v", err)
	}
}

func TestBootErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang.sh")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	crash := filepath.Join(dir, "crash.sh")
	if err := os.WriteFile(crash, []byte("#!/bin/sh\necho cannot start >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		binary  string
		spec    func(t *testing.T) vmm.Spec
		wantIs  error
		wantMsg string
	}{
		{name: "never ready", binary: hang, spec: newSpec, wantIs: vmm.ErrGuestTimeout},
		{name: "exits at boot", binary: crash, spec: newSpec, wantMsg: "exited while booting"},
		{name: "missing binary", binary: filepath.Join(dir, "nope"), spec: newSpec, wantMsg: "guest binary"},
		{name: "relative dir", binary: guestBinary, spec: func(*testing.T) vmm.Spec { return vmm.Spec{Dir: "rel"} }, wantMsg: "absolute"},
		{name: "dir too long", binary: guestBinary, spec: func(*testing.T) vmm.Spec { return vmm.Spec{Dir: "/" + strings.Repeat("d", 120)} }, wantMsg: "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := process.New(process.Config{GuestBinary: tt.binary}, process.Deps{})
			spec := tt.spec(t)
			_, err := b.Boot(ctxFor(t, 500*time.Millisecond), spec)
			if err == nil || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Boot = %v, want %v / %q", err, tt.wantIs, tt.wantMsg)
			}
			if filepath.IsAbs(spec.Dir) && len(spec.Dir) < 100 {
				if _, err := os.Lstat(filepath.Join(spec.Dir, process.InfoFile)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("failed boot left %s", process.InfoFile)
				}
			}
		})
	}
}

func TestRestoreRejectsForeignSnapshot(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	_, err := b.Restore(ctxFor(t, 5*time.Second), newSpec(t), vmm.Snapshot{Backend: "qemu", Files: map[string]string{"memory": "/x"}})
	if !errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("Restore = %v, want ErrUnsupported", err)
	}
}
