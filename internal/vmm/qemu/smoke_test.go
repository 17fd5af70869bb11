package qemu

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

func execOut(t *testing.T, m vmm.Machine, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	var out, errb bytes.Buffer
	res, err := cl.Exec(ctx, guestapi.ExecStart{Argv: argv}, nil, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", argv, res.ExitCode, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func TestBootSnapshotRestore(t *testing.T) {
	b := newTestBackend(t)
	acquireGuest(t)
	ctx := context.Background()
	start := time.Now()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: "smoke", Dir: t.TempDir(), MemoryMiB: 256, VCPUs: 1,
		Hostname: "smoke", Env: map[string]string{"ENGRAMS_TEST": "yes"}})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	defer m.Destroy(ctx)
	t.Logf("boot→ready %.2fs", time.Since(start).Seconds())
	if got := execOut(t, m, "uname", "-r"); !strings.Contains(got, "cloud") && got == "" {
		t.Fatalf("uname -r = %q", got)
	}
	// Two engrams mounts: the bundle and the (placeholder) harness.
	if got := execOut(t, m, "sh", "-c", "echo $ENGRAMS_TEST; hostname; mount | grep -c engrams"); got != "yes\nsmoke\n2" {
		t.Errorf("env/hostname/bundle and harness = %q", got)
	}
	pid := execOut(t, m, "sh", "-c",
		`setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done' >/dev/null 2>&1 & echo $!`)
	time.Sleep(500 * time.Millisecond)
	before := execOut(t, m, "cat", "/tmp/c")
	bootID := execOut(t, m, "cat", "/proc/sys/kernel/random/boot_id")

	if _, err := m.Snapshot(ctx, t.TempDir()); err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := execOut(t, m, "echo", "resumed"); got != "resumed" {
		t.Fatalf("exec after resume = %q", got)
	}
	snapDir := t.TempDir()
	t0 := time.Now()
	snap, err := m.Snapshot(ctx, snapDir)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Logf("snapshot %.3fs files=%v", time.Since(t0).Seconds(), snap.Files)
	if err := m.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	t0 = time.Now()
	r, err := b.Restore(ctx, vmm.Spec{SessionID: "smoke-r", Dir: t.TempDir(), Hostname: "smoke"}, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer r.Destroy(ctx)
	after := execOut(t, r, "cat", "/tmp/c")
	t.Logf("restore→first exec %.3fs; counter %s → %s", time.Since(t0).Seconds(), before, after)
	if execOut(t, r, "cat", "/proc/sys/kernel/random/boot_id") != bootID {
		t.Errorf("boot id changed across restore")
	}
	if got := execOut(t, r, "sh", "-c", "kill -0 "+pid+" && echo alive"); got != "alive" {
		t.Errorf("background process %s gone after restore: %q", pid, got)
	}
	if err := r.Destroy(ctx); err != nil {
		t.Fatalf("destroy restored: %v", err)
	}
}
