package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/testutil"
)

// requireQEMU skips (fails under CI) when QEMU or a guest kernel is missing.
func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testutil.SkipOrFail(t, "qemu-system-x86_64 not installed (scripts/install-deps.sh installs it)")
	}
	if k, _ := filepath.Glob("/boot/vmlinuz-*"); len(k) == 0 {
		testutil.SkipOrFail(t, "no guest kernel in /boot (scripts/install-deps.sh installs linux-image-cloud-amd64)")
	}
}

// vmmPIDs lists QEMU processes whose command line mentions dir.
func vmmPIDs(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("qemu-system")) || !bytes.Contains(cmd, []byte(dir)) {
			continue
		}
		if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie waiting for its reaper holds nothing
		}
		out = append(out, pid)
	}
	return out
}

// TestQEMUSessionSurvivesHostAgentRestart runs a session in a real VM
// (QEMU, TCG here), kills the host agent with SIGKILL, restarts it, and
// checks the VM was reattached with its processes; deleting the session
// then leaves no QEMU process behind.
func TestQEMUSessionSurvivesHostAgentRestart(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	ctx := context.Background()
	st := openSQLite(t)
	creds := credentials(t, st, "vm-host")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second})
	dir := shortTempDir(t)
	h := startHostProcess(t, r.URL, creds.HostToken, dir, "--backend", "qemu")
	c := newClient(r.URL, creds.Token)
	waitHostReady(t, c, creds.HostID)
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(dir) { // never leak a VM, even when the test fails
			_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
		}
	})

	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v (host log: %s)", s, err, filepath.Join(dir, "..", filepath.Base(dir)+".log"))
	}
	run := func(script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 60000}, &out, &errb)
		if err != nil || code != 0 {
			t.Fatalf("exec %q: code %d, %v, stderr %q", script, code, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	hostKernel, _ := exec.Command("uname", "-r").Output()
	if guest := run("uname -r"); guest == strings.TrimSpace(string(hostKernel)) || guest == "" {
		t.Fatalf("guest kernel %q is the host's: not a VM", guest)
	}
	bg := run("sleep 100000 >/dev/null 2>&1 & echo $!")
	vms := vmmPIDs(dir)
	if len(vms) != 1 {
		t.Fatalf("want 1 QEMU for the session, found %v", vms)
	}

	h.kill()
	if got := vmmPIDs(dir); len(got) != 1 || got[0] != vms[0] {
		t.Fatalf("QEMU did not survive the host agent's SIGKILL: %v", got)
	}
	startHostProcess(t, r.URL, creds.HostToken, dir, "--backend", "qemu")
	eventually(t, 60*time.Second, "exec through the restarted host agent", func() (bool, string) {
		_, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
		return err == nil, fmt.Sprint(err)
	})
	if out := run("kill -0 " + bg + " && echo alive"); out != "alive" {
		t.Fatalf("background process %s lost across the agent restart: %q", bg, out)
	}
	if got := vmmPIDs(dir); len(got) != 1 || got[0] != vms[0] {
		t.Fatalf("after restart want the same QEMU %d, found %v", vms[0], got)
	}

	if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "no QEMU left after delete", func() (bool, string) {
		left := vmmPIDs(dir)
		return len(left) == 0, fmt.Sprint(left)
	})
	if ents, _ := os.ReadDir(filepath.Join(dir, "machines")); len(ents) != 0 {
		t.Fatalf("machine files left behind: %d entries", len(ents))
	}
}

// TestQEMUSuspendOnOneHostResumeOnAnother is issue 4's end-to-end check on
// real VMs: write a file and start a background counter; suspend; the VM
// is gone; stop that host; the next exec resumes the session on the OTHER
// host from the shared blob store, with the file there and the counter
// process the same PID, its count continuing. Host b serves memory lazily
// (issue 28): 64 MiB written to guest memory read back byte for byte, and
// a second suspend and resume of the lazily restored machine keeps it all.
func TestQEMUSuspendOnOneHostResumeOnAnother(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	ctx := context.Background()
	st := openSQLite(t)
	credsA := credentials(t, st, "vm-a")
	credsB := credentials(t, st, "vm-b")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second})
	blobs := shortTempDir(t)
	dirA, dirB := shortTempDir(t), shortTempDir(t)
	t.Cleanup(func() {
		for _, d := range []string{dirA, dirB} {
			for _, pid := range vmmPIDs(d) {
				_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
			}
		}
	})
	a := startHostProcess(t, r.URL, credsA.HostToken, dirA, "--backend", "qemu", "--blob-dir", blobs)
	c := newClient(r.URL, credsA.Token)
	waitHostReady(t, c, credsA.HostID)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" || s.HostID != credsA.HostID {
		t.Fatalf("create: %+v %v", s, err)
	}
	run := func(script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 120000}, &out, &errb)
		if err != nil || code != 0 {
			t.Fatalf("exec %q: code %d, %v, stderr %q", script, code, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	run("echo persisted > /root/hello && sync")
	// 64 MiB of random bytes in guest memory (tmpfs): every one must come
	// back through a lazy restore.
	sum := run("mkdir -p /dev/shm && mount -t tmpfs -o size=80m tmpfs /dev/shm 2>/dev/null; head -c 67108864 /dev/urandom > /dev/shm/touched && sha256sum /dev/shm/touched | cut -d' ' -f1")
	pid := run("sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 & echo $!")
	time.Sleep(time.Second)
	before, _ := strconv.Atoi(run("cat /tmp/count"))

	t0 := time.Now()
	idle, err := c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.State != "idle" {
		t.Fatalf("suspend: %+v %v", idle, err)
	}
	t.Logf("suspend took %s", time.Since(t0).Round(time.Millisecond))
	eventually(t, 20*time.Second, "VM gone after suspend", func() (bool, string) {
		left := vmmPIDs(dirA)
		return len(left) == 0, fmt.Sprint(left)
	})
	a.kill()
	startHostProcess(t, r.URL, credsB.HostToken, dirB, "--backend", "qemu", "--blob-dir", blobs, "--lazy-memory", "on")
	waitHostReady(t, c, credsB.HostID)

	t0 = time.Now()
	checkResumedLazily(t, run, dirB, pid, before, sum)
	t.Logf("resume on the other host + checks took %s", time.Since(t0).Round(time.Millisecond))
	got, _ := c.Sessions().Get(ctx, s.ID)
	if got.HostID != credsB.HostID || len(got.Snapshots) != 1 {
		t.Fatalf("session after resume: host %s (want %s), %d snapshots", got.HostID, credsB.HostID, len(got.Snapshots))
	}
	checkLazyCycle(t, c, s.ID, run, dirB, pid, sum)
	if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "no QEMU left", func() (bool, string) {
		left := append(vmmPIDs(dirA), vmmPIDs(dirB)...)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// lazyMachine reports whether a machine under the host data dir has its
// memory served by the pager (its overlay file is there).
func lazyMachine(dataDir string) bool {
	found := false
	_ = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "memory.overlay" {
			found = true
			return filepath.SkipAll
		}
		if err == nil && d.IsDir() && d.Name() == "lazy-memory" {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// checkLazyCycle suspends a lazily restored session, whose capture stores
// only what its guest wrote, and resumes it (on the same host): the file,
// the 64 MiB in memory and the counter process are all there.
func checkLazyCycle(t *testing.T, c *client.Client, sid string, run func(string) string, dataDir, pid, sum string) {
	t.Helper()
	run("echo again >> /root/hello && sync")
	if _, err := c.Sessions().Suspend(context.Background(), sid, true); err != nil {
		t.Fatal(err)
	}
	out := run("cat /root/hello; sha256sum /dev/shm/touched | cut -d' ' -f1; kill -0 " + pid + " && echo alive")
	if want := "persisted\nagain\n" + sum + "\nalive"; out != want {
		t.Fatalf("after a lazy capture and restore: %q, want %q", out, want)
	}
	if !lazyMachine(dataDir) {
		t.Fatal("the second restore rebuilt the memory whole, not lazily")
	}
}

// checkResumedLazily checks a session resumed on another host whose
// memory it serves lazily: the file, the counter process (the same one,
// counting on from where it was) and the 64 MiB in memory byte for byte.
func checkResumedLazily(t *testing.T, run func(string) string, dataDir, pid string, before int, sum string) {
	t.Helper()
	lines := strings.Fields(run("cat /root/hello; cat /tmp/count; kill -0 " + pid + " && echo alive"))
	if len(lines) != 3 || lines[0] != "persisted" || lines[2] != "alive" {
		t.Fatalf("after resume on host b: %q; want the file, the count and the same counter process", lines)
	}
	if after, _ := strconv.Atoi(lines[1]); after < before {
		t.Fatalf("counter went back: %d before suspend, %d after resume", before, after)
	}
	if !lazyMachine(dataDir) {
		t.Fatal("host b restored the session's memory whole, not lazily")
	}
	if got := run("sha256sum /dev/shm/touched | cut -d' ' -f1"); got != sum {
		t.Fatalf("guest memory after a lazy restore: sha256 %s, want %s", got, sum)
	}
	time.Sleep(time.Second)
	if later, _ := strconv.Atoi(run("cat /tmp/count")); later <= before {
		t.Fatalf("counter process is not counting after resume: %d then %d", before, later)
	}
}
