package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/server"
)

// snapshotGuestMiB and touchedMiB are the snapshot rows' guest: 1 GiB of
// memory with 256 MiB of it written with random bytes.
const (
	snapshotGuestMiB = 1024
	touchedMiB       = 256
	guestDaemonName  = "guest daemon VmHWM, 1 GiB guest"
	qemuBootedName   = "QEMU, 1 GiB guest just booted"
)

// benchSnapshots measures idle-to-zero on QEMU with chunks in an S3 server
// on loopback (gofakes3) and the coordinator as its own process: n first
// suspends (a session each), n+1 later ones of one session, each resumed on
// the same host (chunks cached), and n resumes on another host with a cold
// cache; and the peak RSS of the coordinator, the host agent, the guest
// daemon and each QEMU process.
func benchSnapshots(t *testing.T, tb *benchTable, n int) {
	s3args := startBenchS3(t)
	dir := shortTempDir(t)
	url, srv := startServerProcess(t, dir, "--heartbeat-interval", "500ms", "--host-lost-after", "30s")
	st, err := openSQLiteFile(filepath.Join(dir, "db")) // beside the server, as an admin would
	if err != nil {
		t.Fatal(err)
	}
	creds := make([]server.Credentials, n+1) // the first host's, then one per cold resume
	for i := range creds {
		creds[i] = credentials(t, st, fmt.Sprint("bench-", i))
	}
	st.Close()
	coordIdle := rssBytes(srv.Process.Pid)
	dirA := shortTempDir(t)
	t.Cleanup(func() { killVMMs(dirA) })
	a := startHostProcess(t, url, creds[0].HostToken, dirA, s3args...)
	c := newClient(url, creds[0].Token)
	waitHostReady(t, c, creds[0].HostID)
	hostIdle := rssBytes(a.cmd.Process.Pid)
	id := benchFirstSuspends(t, c, tb, n, dirA)
	w := benchWarmCycles(t, c, id, n+1, dirA)
	hostPeak := hwmBytes(a.cmd.Process.Pid)
	tb.sizes(groupRSS, "QEMU, restored on the same host (+exec)", w.restored, qemuBootedName, "VmHWM before the next suspend")
	suspendRows(tb, "later suspend, idle between", w.suspend, w.uploaded, "first suspend")
	tb.durations(groupResume, "resume same host, chunks cached (+exec)", w.resume, "", "")
	cold := benchColdResumes(t, c, url, id, creds[1:], a, s3args)
	tb.durations(groupResume, "resume other host, cold cache (+exec)", cold, "resume same host, chunks cached (+exec)", "")
	_ = c.Sessions().Delete(context.Background(), id, true)
	tb.sizes(groupRSS, "coordinator VmHWM (snapshot rows)", []int64{hwmBytes(srv.Process.Pid)}, "coordinator VmRSS idle", "its own process")
	tb.sizes(groupRSS, "coordinator VmRSS idle", []int64{coordIdle}, "", "just started")
	tb.sizes(groupRSS, "host agent VmHWM (boots, suspends, resumes)", []int64{hostPeak}, "host agent VmRSS idle", "")
	tb.sizes(groupRSS, "host agent VmRSS idle", []int64{hostIdle}, "", "ready, no session")
}

// benchFirstSuspends creates n 1 GiB sessions on the host in dir, one at a
// time, writes 256 MiB of random bytes into each one's memory, and times
// its first suspend; it keeps the last session, idle, and deletes the
// others. The QEMU and guest daemon RSS rows are read on the way.
func benchFirstSuspends(t *testing.T, c *client.Client, tb *benchTable, n int, dir string) (kept string) {
	t.Helper()
	ctx := context.Background()
	var took []time.Duration
	var uploaded, booted, written, daemon []int64
	for i := range n {
		s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: snapshotGuestMiB, IdleTimeoutSec: -1}}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("create: %+v %v", s, err)
		}
		booted = append(booted, vmmHWM(dir))
		// Incompressible, non-repeating data in guest memory (tmpfs).
		execOut(t, c, s.ID, fmt.Sprintf("mkdir -p /dev/shm && mount -t tmpfs -o size=300m tmpfs /dev/shm 2>/dev/null; head -c %d /dev/urandom > /dev/shm/touched && echo ok", touchedMiB<<20))
		daemon, written = append(daemon, guestDaemonHWM(t, c, s.ID)), append(written, vmmHWM(dir))
		d, up := suspendOnce(t, c, s.ID)
		took, uploaded = append(took, d), append(uploaded, up)
		if kept = s.ID; i < n-1 {
			if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	tb.sizes(groupRSS, qemuBootedName, booted, "", "VmHWM right after create")
	tb.sizes(groupRSS, "QEMU, 1 GiB guest, 256 MiB written", written, qemuBootedName, "VmHWM before its first suspend")
	guestDaemonRow(tb, guestDaemonName, daemon, "", "read in the guest, 256 MiB touched")
	suspendRows(tb, "first suspend", took, uploaded, "")
	return kept
}

// suspendOnce suspends session id and returns how long it took, until
// idle, and the bytes its snapshot uploaded.
func suspendOnce(t *testing.T, c *client.Client, id string) (time.Duration, int64) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	if got, err := c.Sessions().Suspend(ctx, id, true); err != nil || got.State != "idle" {
		t.Fatalf("suspend: %+v %v", got, err)
	}
	d := time.Since(t0)
	g, err := c.Sessions().Get(ctx, id)
	if err != nil || len(g.Snapshots) == 0 {
		t.Fatalf("get %s: %v", id, err)
	}
	return d, g.Snapshots[len(g.Snapshots)-1].Uploaded
}

// suspendRows adds a kind of suspend's rows: its time, with the upload
// rate, and the bytes it uploaded, with their share of guest memory.
func suspendRows(tb *benchTable, kind string, took []time.Duration, uploaded []int64, base string) {
	up, d := pct(uploaded, 50), pct(took, 50)
	rate := fmt.Sprintf("%.0f MB/s uploaded, %.0f MB/s of guest memory (medians)", float64(up)/1e6/d.Seconds(), float64(snapshotGuestMiB<<20)/1e6/d.Seconds())
	timeBase, sizeBase := "", ""
	if base != "" {
		timeBase, sizeBase = base+" (1 GiB guest, 256 MiB touched)", base+": bytes uploaded"
	}
	tb.durations(groupSuspend, kind+" (1 GiB guest, 256 MiB touched)", took, timeBase, rate)
	tb.sizes(groupSuspend, kind+": bytes uploaded", uploaded, sizeBase,
		fmt.Sprintf("%.2f%% of guest memory (median)", 100*float64(up)/float64(snapshotGuestMiB<<20)))
}

// benchColdResumes stops the host idle session id was on (from) and
// resumes the session, by an exec, on a new host with an empty cache (its
// own data dir), then suspends it again, once per creds.
func benchColdResumes(t *testing.T, c *client.Client, url, id string, creds []server.Credentials, from *hostProc, s3args []string) []time.Duration {
	t.Helper()
	var cold []time.Duration
	last := from
	for i, cr := range creds {
		if i > 0 {
			suspendOnce(t, c, id)
		}
		last.kill()
		dir := shortTempDir(t)
		t.Cleanup(func() { killVMMs(dir) })
		last = startHostProcess(t, url, cr.HostToken, dir, s3args...)
		waitHostReady(t, c, cr.HostID)
		t0 := time.Now()
		if out := execOut(t, c, id, "test -s /dev/shm/touched && echo kept"); out != "kept" {
			t.Fatalf("touched memory lost on the other host: %q", out)
		}
		cold = append(cold, time.Since(t0))
	}
	return cold
}

// startBenchS3 serves an S3 bucket "engrams" on loopback (gofakes3) and
// returns the host agent flags that put chunks there, on QEMU.
func startBenchS3(t *testing.T) []string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("engrams"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(s3srv.Close)
	return []string{"--s3-endpoint", strings.TrimPrefix(s3srv.URL, "http://"), "--s3-bucket", "engrams",
		"--s3-access-key", "k", "--s3-secret-key", "s", "--s3-tls=false", "--log-level", "warn", "--backend", "qemu",
		"--lazy-memory", benchLazyMemory()}
}

// warmCycles is what benchWarmCycles measured.
type warmCycles struct {
	suspend, resume []time.Duration
	uploaded        []int64 // bytes, by each suspend
	restored        []int64 // the QEMU process's VmHWM, by each resume
}

// benchWarmCycles resumes idle session id n times on the same host (its
// data dir dir), by an exec, and suspends it again, and records how long
// each took, how much each suspend uploaded and the QEMU's peak RSS.
func benchWarmCycles(t *testing.T, c *client.Client, id string, n int, dir string) warmCycles {
	t.Helper()
	var w warmCycles
	for range n {
		t0 := time.Now()
		execOut(t, c, id, "true")
		w.resume = append(w.resume, time.Since(t0))
		w.restored = append(w.restored, vmmHWM(dir))
		d, up := suspendOnce(t, c, id)
		w.suspend, w.uploaded = append(w.suspend, d), append(w.uploaded, up)
	}
	return w
}

// vmmHWM is the largest peak RSS (VmHWM) of the QEMU processes under dir.
func vmmHWM(dir string) int64 {
	var most int64
	for _, pid := range vmmPIDs(dir) {
		most = max(most, hwmBytes(pid))
	}
	return most
}

// killVMMs kills the VMMs left under a host data dir.
func killVMMs(dir string) {
	for _, pid := range vmmPIDs(dir) {
		_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
	}
}

// hwmBytes reads VmHWM (peak resident set) of pid.
func hwmBytes(pid int) int64 { return statusBytes(pid, "VmHWM:") }

// benchLazyMemory is the hosts' --lazy-memory in the snapshot bench:
// ENGRAMS_BENCH_LAZY (on, off), on by default.
func benchLazyMemory() string {
	if v := os.Getenv("ENGRAMS_BENCH_LAZY"); v != "" {
		return v
	}
	return "on"
}
