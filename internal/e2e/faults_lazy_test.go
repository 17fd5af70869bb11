package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
)

// TestHostKilledMidLazyRestore (issue 28): a session suspended on host a
// resumes on host b, which serves its memory lazily; chunk downloads are
// slowed so the prefetch is still running when host b's agent gets
// SIGKILL with the VM up. The restarted agent must not adopt the machine
// (its memory lived in the dead agent): the session ends on exactly one
// host, idle at its only snapshot or active again from it, never live
// twice; no committed snapshot names a missing chunk; the next exec
// resumes it with every byte of its memory and disk.
func TestHostKilledMidLazyRestore(t *testing.T) {
	requireQEMU(t) // not parallel: one QEMU guest at a time
	ctx := context.Background()
	st, gate := openSQLite(t), startS3Gate(t)
	credsA, credsB := credentials(t, st, "lazy-a"), credentials(t, st, "lazy-b")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 250 * time.Millisecond, HostLostAfter: 8 * time.Second})
	c := newClient(r.URL, credsA.Token)
	dirA, dirB := shortTempDir(t), shortTempDir(t)
	args := append(gate.hostArgs(), "--backend", "qemu", "--lazy-memory", "on")
	a := startHostProcess(t, r.URL, credsA.HostToken, dirA, args...)
	waitHostReady(t, c, credsA.HostID)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	sums := execOut(t, c, s.ID, "mkdir -p /dev/shm && mount -t tmpfs -o size=80m tmpfs /dev/shm 2>/dev/null; "+
		"head -c 67108864 /dev/urandom > /dev/shm/mem.bin && head -c 3000000 /dev/urandom > /root/disk.bin && sync && "+
		"sha256sum /dev/shm/mem.bin /root/disk.bin")
	idle, err := c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.State != "idle" {
		t.Fatalf("suspend: %+v %v", idle, err)
	}
	a.kill()

	b := startHostProcess(t, r.URL, credsB.HostToken, dirB, args...)
	waitHostReady(t, c, credsB.HostID)
	killed := make(chan struct{})
	var once sync.Once
	gate.armGets(func() {
		if !lazyMachine(dirB) {
			return
		}
		time.Sleep(20 * time.Millisecond) // keep the prefetch going
		if len(vmmPIDs(dirB)) > 0 {
			once.Do(func() { b.kill(); close(killed) })
		}
	})
	go func() { _, _ = c.Sessions().Resume(ctx, s.ID) }()
	select {
	case <-killed:
	case <-time.After(3 * time.Minute):
		t.Fatalf("host b never served the memory lazily with its VM up (log %s)", hostLog(dirB))
	}
	gate.armGets(nil)
	startHostProcess(t, r.URL, credsB.HostToken, dirB, args...)
	end := settled(t, c, s.ID, 3*time.Minute)
	rows := noDuplicateSnapshots(t, st, end)
	if end.State == "dead" || len(rows) != 1 || end.HeadSnapshot != idle.HeadSnapshot {
		t.Fatalf("after the kill: %s, %d snapshots; want idle or active from the only snapshot %s", describe(end), len(rows), idle.HeadSnapshot)
	}
	for _, row := range rows {
		if missing := gate.missingChunks(t, row); len(missing) > 0 {
			t.Fatalf("snapshot %s names %d chunks the store lacks", row.ID, len(missing))
		}
	}
	if got := execOut(t, c, s.ID, "sha256sum /dev/shm/mem.bin /root/disk.bin"); got != sums {
		t.Fatalf("after the kill and a resume: %q, want %q", got, sums)
	}
	if n := len(vmmPIDs(dirB)); n != 1 || len(vmmPIDs(dirA)) != 0 {
		t.Fatalf("VMMs: %d on host b, %d on host a; want exactly one, on b", n, len(vmmPIDs(dirA)))
	}
	if logCount(hostLog(dirB), "restores serve memory lazily") < 2 {
		t.Fatalf("host b did not serve memory lazily in both runs (log %s)", hostLog(dirB))
	}
}
