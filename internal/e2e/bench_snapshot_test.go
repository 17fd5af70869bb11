package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
)

// TestBenchSnapshots measures idle-to-zero on QEMU (TCG here) with chunks
// in an S3 server on loopback (gofakes3): suspend of a 1 GiB guest with
// 256 MiB touched, bytes uploaded by the first and by later suspends,
// resume on the same host (chunks cached) and on another host (cold cache),
// and the host agent's peak RSS. ENGRAMS_BENCH=1 runs it; it prints a table.
func TestBenchSnapshots(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") == "" {
		t.Skip("benchmark: set ENGRAMS_BENCH=1 to run")
	}
	requireQEMU(t)
	ctx := context.Background()
	s3args := startBenchS3(t)

	st := openSQLite(t)
	credsA, credsB := credentials(t, st, "bench-a"), credentials(t, st, "bench-b")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second})
	dirA, dirB := shortTempDir(t), shortTempDir(t)
	t.Cleanup(func() { killVMMs(dirA); killVMMs(dirB) })
	a := startHostProcess(t, r.URL, credsA.HostToken, dirA, s3args...)
	c := newClient(r.URL, credsA.Token)
	waitHostReady(t, c, credsA.HostID)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 1024, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	run := func(script string) string {
		var out, errb bytes.Buffer
		code, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 300000}, &out, &errb)
		if err != nil || code != 0 {
			t.Fatalf("exec %q: %d %v %s", script, code, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	// 256 MiB of incompressible, non-repeating data in guest memory (tmpfs).
	run("mkdir -p /dev/shm && mount -t tmpfs -o size=300m tmpfs /dev/shm 2>/dev/null; head -c 268435456 /dev/urandom > /dev/shm/touched && echo ok")

	w := benchWarmCycles(t, c, s.ID, run, 5)
	w.hwm = hwmBytes(a.cmd.Process.Pid)

	// Cold, 3 times: suspend, stop the host, resume on a new host with an
	// empty cache (its own data dir).
	var cold []time.Duration
	last := a
	for i := range 3 {
		if _, err := c.Sessions().Suspend(ctx, s.ID, true); err != nil {
			t.Fatal(err)
		}
		last.kill()
		creds := credsB
		if i > 0 {
			creds = credentials(t, st, fmt.Sprintf("bench-cold-%d", i))
		}
		dir := dirB
		if i > 0 {
			dir = shortTempDir(t)
			t.Cleanup(func() { killVMMs(dir) })
		}
		last = startHostProcess(t, r.URL, creds.HostToken, dir, s3args...)
		waitHostReady(t, c, creds.HostID)
		t0 := time.Now()
		if out := run("test -s /dev/shm/touched && echo kept"); out != "kept" {
			t.Fatalf("touched memory lost on the other host: %q", out)
		}
		cold = append(cold, time.Since(t0))
	}
	_ = c.Sessions().Delete(ctx, s.ID, true)
	printSnapshotBench(w, cold)
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
		"--s3-access-key", "k", "--s3-secret-key", "s", "--s3-tls=false", "--log-level", "warn", "--backend", "qemu"}
}

// warmCycles is what benchWarmCycles measured, and the host agent's peak
// RSS over them.
type warmCycles struct {
	suspend, resume []time.Duration
	uploaded        []int64 // bytes, by each suspend
	hwm             int64
}

// benchWarmCycles suspends session id n times, each resumed on the same
// host by an exec (run), and records how long each took and uploaded.
func benchWarmCycles(t *testing.T, c *client.Client, id string, run func(script string) string, n int) warmCycles {
	t.Helper()
	ctx := context.Background()
	var w warmCycles
	for i := range n {
		t0 := time.Now()
		if got, err := c.Sessions().Suspend(ctx, id, true); err != nil || got.State != "idle" {
			t.Fatalf("suspend %d: %+v %v", i, got, err)
		}
		w.suspend = append(w.suspend, time.Since(t0))
		g, _ := c.Sessions().Get(ctx, id)
		w.uploaded = append(w.uploaded, g.Snapshots[len(g.Snapshots)-1].Uploaded)
		t0 = time.Now()
		run("true")
		w.resume = append(w.resume, time.Since(t0))
	}
	return w
}

// printSnapshotBench prints the snapshot benchmark's table.
func printSnapshotBench(w warmCycles, cold []time.Duration) {
	suspendT, resumeT, uploaded := w.suspend, w.resume, w.uploaded
	var b strings.Builder
	fmt.Fprintf(&b, "\nsnapshot benchmark: QEMU TCG, 1 GiB guest with 256 MiB touched, chunks in S3 on loopback (gofakes3)\n")
	fmt.Fprintf(&b, "%-44s %3s %10s %10s\n", "measure", "n", "median", "p95")
	fmt.Fprintf(&b, "%-44s %3d %10s %10s\n", "first suspend (API, until idle)", 1, secs(suspendT[0]), secs(suspendT[0]))
	fmt.Fprintf(&b, "%-44s %3d %10s %10s\n", "later suspends, guest idle between", len(suspendT)-1, secs(pct(suspendT[1:], 50)), secs(pct(suspendT[1:], 95)))
	fmt.Fprintf(&b, "%-44s %3d %10s %10s\n", "resume same host, chunks cached (+exec)", len(resumeT), secs(pct(resumeT, 50)), secs(pct(resumeT, 95)))
	fmt.Fprintf(&b, "%-44s %3d %10s %10s\n", "resume other host, cold cache (+exec)", len(cold), secs(pct(cold, 50)), secs(pct(cold, 95)))
	fmt.Fprintf(&b, "bytes uploaded per suspend: first %s", mibs(uploaded[0]))
	for _, u := range uploaded[1:] {
		fmt.Fprintf(&b, ", %s (%.2f%%)", mibs(u), 100*float64(u)/float64(uploaded[0]))
	}
	fmt.Fprintf(&b, "\nhost agent peak RSS (VmHWM) over boot + 5 suspends + 5 resumes: %.1f MiB\n", mib(w.hwm))
	fmt.Print(b.String())
}

// killVMMs kills the VMMs left under a host data dir.
func killVMMs(dir string) {
	for _, pid := range vmmPIDs(dir) {
		_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
func mibs(n int64) string         { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// hwmBytes reads VmHWM (peak resident set) of pid.
func hwmBytes(pid int) int64 { return statusBytes(pid, "VmHWM:") }
