package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// midUploadCase is one backend of TestHostKilledMidUpload.
type midUploadCase struct {
	name      string
	backend   string
	dir       string // where the guest's files go
	memoryMiB int
	killAt    int // the chunk PUT of the second snapshot that triggers the kill
	lostAfter time.Duration
	deadline  time.Duration // for each wait
	restart   bool          // restart the killed agent instead of starting a second host
}

// TestHostKilledMidUpload: a session's first snapshot is committed; its
// second is being uploaded (chunks in S3 on loopback) when the host agent
// gets SIGKILL at a chosen chunk PUT. Then a second host starts, or the
// killed agent restarts. No partial snapshot is ever recorded. With a
// second host the session must end Idle at the first snapshot (resumed
// there with that snapshot's data and none of the later) or Dead with a
// reason, and it is never live on two hosts: whenever the API shows it
// away from the killed host, the machine there is paused or gone. A
// restarted agent may also finish the suspend: Idle at a new snapshot on
// top of the first, holding the later data. On the process backend and on
// QEMU (TCG here).
func TestHostKilledMidUpload(t *testing.T) {
	tests := []midUploadCase{
		{name: "process", backend: "process", dir: ".", memoryMiB: 64, killAt: 3,
			lostAfter: 3 * time.Second, deadline: 90 * time.Second},
		{name: "process restart", backend: "process", dir: ".", memoryMiB: 64, killAt: 3,
			lostAfter: 3 * time.Second, deadline: 90 * time.Second, restart: true},
		{name: "qemu", backend: "qemu", dir: "/root", memoryMiB: 256, killAt: 40,
			lostAfter: 8 * time.Second, deadline: 5 * time.Minute},
		{name: "qemu restart", backend: "qemu", dir: "/root", memoryMiB: 256, killAt: 40,
			lostAfter: 8 * time.Second, deadline: 5 * time.Minute, restart: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.backend == "qemu" {
				requireQEMU(t) // not parallel: one QEMU guest at a time
			} else {
				t.Parallel()
			}
			k := newKillRig(t, tt)
			k.killMidUpload()
			if tt.restart {
				k.restartAndCheck()
			} else {
				k.moveAndCheck()
			}
		})
	}
}

// killRig is one run of TestHostKilledMidUpload.
type killRig struct {
	t              *testing.T
	tt             midUploadCase
	st             store.Store
	url            string
	c              *client.Client
	gate           *s3Gate
	hostArgs       []string
	credsA, credsB server.Credentials
	dirA, dirB     string
	a              *hostProc
	sid            string
	snap1, sum1    string // the first snapshot, and sha256sum of the file it holds
}

// newKillRig starts a coordinator and host a, and leaves a session on a
// with one committed snapshot and later data written since.
func newKillRig(t *testing.T, tt midUploadCase) *killRig {
	ctx := context.Background()
	k := &killRig{t: t, tt: tt, st: openSQLite(t), gate: startS3Gate(t), dirA: shortTempDir(t), dirB: shortTempDir(t)}
	k.credsA, k.credsB = credentials(t, k.st, "kill-a"), credentials(t, k.st, "kill-b")
	r := startReplica(t, k.st, "", coordinator.Config{HeartbeatInterval: 250 * time.Millisecond, HostLostAfter: tt.lostAfter})
	k.url, k.c = r.URL, newClient(r.URL, k.credsA.Token)
	k.hostArgs = append(k.gate.hostArgs(), "--backend", tt.backend)
	k.a = startHostProcess(t, k.url, k.credsA.HostToken, k.dirA, k.hostArgs...)
	waitHostReady(t, k.c, k.credsA.HostID)

	s, err := k.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: tt.memoryMiB, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" || s.HostID != k.credsA.HostID {
		t.Fatalf("create: %+v %v (host log %s)", s, err, hostLog(k.dirA))
	}
	k.sid = s.ID
	k.sum1 = execOut(t, k.c, s.ID, "cd "+tt.dir+" && head -c 6000000 /dev/urandom > one.bin && echo one > marker1 && sync && sha256sum one.bin")
	idle, err := k.c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.State != "idle" || idle.HeadSnapshot == "" {
		t.Fatalf("first suspend: %+v %v", idle, err)
	}
	k.snap1 = idle.HeadSnapshot
	execOut(t, k.c, s.ID, "cd "+tt.dir+" && head -c 20000000 /dev/urandom > two.bin && echo two > marker2 && sync")
	return k
}

// killMidUpload suspends the session again and SIGKILLs host a when the
// second snapshot's chunk PUT number killAt arrives (that PUT waits for
// the kill, then is refused); later PUTs pass.
func (k *killRig) killMidUpload() {
	t := k.t
	killed := make(chan struct{})
	k.gate.arm(func(n int) bool {
		if n != k.tt.killAt {
			return false
		}
		k.a.kill()
		close(killed)
		return true
	})
	if _, err := k.c.Sessions().Suspend(context.Background(), k.sid, false); err != nil {
		t.Fatalf("second suspend: %v", err)
	}
	select {
	case <-killed:
		k.gate.arm(nil)
	case <-time.After(k.tt.deadline):
		got, _ := k.c.Sessions().Get(context.Background(), k.sid)
		t.Fatalf("the second snapshot never reached chunk PUT %d: %s", k.tt.killAt, describe(got))
	}
}

// moveAndCheck starts host b and checks the session ends Dead with a
// reason, or Idle at the first snapshot and resumes on b with its data,
// never live on both hosts.
func (k *killRig) moveAndCheck() {
	t := k.t
	watch := watchNeverTwice(t, k.c, k.sid, k.credsA.HostID, k.tt.backend, k.dirA)
	startHostProcess(t, k.url, k.credsB.HostToken, k.dirB, k.hostArgs...)
	if k.settle() {
		watch.stop(t)
		return
	}
	waitHostReady(t, k.c, k.credsB.HostID)
	k.checkData(false)
	if got, _ := k.c.Sessions().Get(context.Background(), k.sid); got.State != "active" || got.HostID != k.credsB.HostID {
		t.Fatalf("after resume: %s; want active on %s", describe(got), k.credsB.HostID)
	}
	if n := watch.stop(t); n == 0 {
		t.Fatal("the watcher never saw the session away from the killed host")
	}
}

// restartAndCheck restarts host a and checks the session ends Dead with a
// reason, Idle at the first snapshot, or Idle at a new snapshot on top of
// it that holds the later data; then it resumes with that data.
func (k *killRig) restartAndCheck() {
	t := k.t
	startHostProcess(t, k.url, k.credsA.HostToken, k.dirA, k.hostArgs...)
	if k.settle() {
		return
	}
	got, _ := k.c.Sessions().Get(context.Background(), k.sid)
	k.checkData(got.HeadSnapshot != k.snap1)
}

// settle waits for the session to settle after the kill and checks what
// the store recorded; it reports whether the session ended Dead.
func (k *killRig) settle() (dead bool) {
	t := k.t
	end := settled(t, k.c, k.sid, k.tt.deadline)
	rows := noDuplicateSnapshots(t, k.st, end)
	switch {
	case end.State == "dead" && end.Reason != "":
		return true
	case end.State != "idle" || len(rows) == 0 || string(rows[0].ID) != k.snap1:
		t.Fatalf("after the kill: %s; want idle (or dead with a reason) on top of %s", describe(end), k.snap1)
	case end.HeadSnapshot == k.snap1 && len(rows) == 1:
		t.Logf("session idle at the first snapshot %s", k.snap1)
	case k.tt.restart && len(rows) == 2 && string(rows[1].ParentID) == k.snap1 && end.HeadSnapshot == string(rows[1].ID):
		if missing := k.gate.missingChunks(t, rows[1]); len(missing) > 0 {
			t.Fatalf("head snapshot %s names %d chunks the store lacks", rows[1].ID, len(missing))
		}
		t.Logf("the restarted agent finished the suspend: idle at %s on top of %s", rows[1].ID, k.snap1)
	default:
		t.Fatalf("after the kill: %s; want idle at the first snapshot %s", describe(end), k.snap1)
	}
	return false
}

// checkData resumes the session and checks it holds the first snapshot's
// data, and the later data exactly when later is set.
func (k *killRig) checkData(later bool) {
	t := k.t
	out := execOut(t, k.c, k.sid, "cd "+k.tt.dir+" && cat marker1 && sha256sum one.bin && ls")
	if !strings.HasPrefix(out, "one\n"+k.sum1) {
		t.Fatalf("resumed state lost the first snapshot's data: %q (want marker1 and one.bin %q)", out, k.sum1)
	}
	if has := strings.Contains(out, "marker2") && strings.Contains(out, "two.bin"); has != later {
		t.Fatalf("resumed state %q: later data present %v, want %v", out, has, later)
	}
}
