package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/server"
)

// pauseEnv arms the host agent's test pause points (cmd/engrams).
const pauseEnv = "ENGRAMS_TEST_PAUSE_FILE"

// finishedLocal is what the host agent logs when it answers a retried
// capture from the files a killed agent left complete on disk.
const finishedLocal = "finishing a snapshot a previous agent left complete on disk"

// crashStep is one moment of the kill -9 matrix: the pause point the
// agent is stopped at, and what starts the operation that reaches it.
type crashStep struct {
	point   string
	op      string // "create", "suspend" or "resume"
	withVMM bool   // the session's VMM is killed too, as a kill of every process would
	local   bool   // the capture's files were complete: the restarted agent must answer from them
}

// TestHostAgentKilledAtEachStep kills the host agent with SIGKILL at each
// step of create, resume and suspend of a QEMU guest (TCG here), restarts
// it, and checks after each: exactly one VMM process per live session and
// none for idle or deleted ones (found by scanning /proc), and every file
// written before a suspend began is there after the next resume. A
// suspend whose files were complete on disk is finished from them, also
// when the VMM died with the agent. The steps share one host and, after
// the create steps, one session, so the matrix costs one boot per create
// step and one suspend and resume per suspend step.
func TestHostAgentKilledAtEachStep(t *testing.T) {
	requireQEMU(t) // not parallel: one QEMU guest at a time
	began := time.Now()
	r := newCrashRig(t, false)
	var keep string
	for _, st := range []crashStep{
		{"boot-recorded", "create", false, false}, {"qemu-spawned", "create", false, false}, {"boot-ready", "create", false, false},
	} {
		keep = r.crashCreate(st, keep)
	}
	for _, st := range []crashStep{
		{"qemu-paused", "suspend", false, false}, {"qemu-spawned-restore", "resume", false, false},
		{"snapshot-written", "suspend", false, true}, {"restore-ready", "resume", false, false},
		{"snapshot-uploading", "suspend", false, true}, {"snapshot-uploaded", "suspend", false, true},
		{"snapshot-destroyed", "suspend", false, false}, {"snapshot-written", "suspend", true, true},
		{"snapshot-uploading", "suspend", true, true},
	} {
		r.crashLifecycle(keep, st)
	}
	r.finish(keep)
	t.Logf("matrix of %d kills took %s", r.kills, time.Since(began).Round(time.Second))
}

// TestDevKilledAtSuspendAndResume kills the whole `engrams dev` process
// (coordinator and host agent in one) at the two moments issue 13 found
// unsafe: right after QEMU wrote a suspend snapshot (the VMM killed too,
// as a kill of every process does), and 0.3 s into a resume (QEMU
// spawned, its pid not recorded yet). The restarted coordinator retries
// its op once the op's lease expires.
func TestDevKilledAtSuspendAndResume(t *testing.T) {
	requireQEMU(t)
	began := time.Now()
	r := newCrashRig(t, true)
	sid := r.create()
	for _, st := range []crashStep{{"snapshot-written", "suspend", true, true}, {"qemu-spawned-restore", "resume", false, false}} {
		r.crashLifecycle(sid, st)
	}
	r.finish(sid)
	t.Logf("%d kills of engrams dev took %s", r.kills, time.Since(began).Round(time.Second))
}

// crashRig is a coordinator and a QEMU host agent the test kills: either
// `engrams host run` (the coordinator runs in this test) or `engrams dev`.
type crashRig struct {
	t         *testing.T
	dev       bool
	dir       string // the host agent's data dir
	pauseFile string
	logPath   string
	c         *client.Client
	proc      *exec.Cmd
	start     func() *exec.Cmd // starts the agent (with its coordinator, for dev)
	ready     func()           // waits until its host is ready
	markers   []string         // files written in the kept session, in order
	live      map[string]bool
	kills     int
}

func newCrashRig(t *testing.T, dev bool) *crashRig {
	r := &crashRig{t: t, dev: dev, live: map[string]bool{}}
	base := shortTempDir(t)
	r.pauseFile = filepath.Join(base, "pause")
	if dev {
		r.devRig(base)
	} else {
		r.hostRig(base)
	}
	t.Cleanup(func() {
		r.kill()
		if t.Failed() { // the temp dir goes: keep the agent's log
			kept := filepath.Join(os.TempDir(), "engrams-"+strings.ReplaceAll(t.Name(), "/", "-")+".log")
			if b, err := os.ReadFile(r.logPath); err == nil && os.WriteFile(kept, b, 0o644) == nil {
				t.Logf("agent log kept in %s", kept)
			}
		}
		for _, pid := range vmmPIDs(r.dir) { // never leak a VM, even when the test fails
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	r.proc = r.start()
	r.ready()
	return r
}

// hostRig runs the coordinator here and `engrams host run` as a process.
func (r *crashRig) hostRig(base string) {
	t := r.t
	st := openSQLite(t)
	creds := credentials(t, st, "crash-host")
	rep := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 300 * time.Millisecond, HostLostAfter: 45 * time.Second})
	r.dir = filepath.Join(base, "h")
	r.logPath = hostLog(r.dir)
	r.c = newClient(rep.URL, creds.Token)
	r.start = func() *exec.Cmd {
		argv := []string{filepath.Join(binDir, "engrams"), "host", "run", "--coordinator", rep.URL, "--token", creds.HostToken,
			"--data-dir", r.dir, "--backend", "qemu", "--log-level", "debug"}
		return r.spawn(argv)
	}
	r.ready = func() { waitHostReady(t, r.c, creds.HostID) }
}

// devRig runs `engrams dev` over its own data dir.
func (r *crashRig) devRig(base string) {
	t := r.t
	addr := freeAddr(t)
	data := filepath.Join(base, "d")
	r.dir = filepath.Join(data, "host")
	r.logPath = filepath.Join(base, "dev.log")
	r.start = func() *exec.Cmd {
		return r.spawn([]string{filepath.Join(binDir, "engrams"), "dev", "--listen", addr, "--data-dir", data,
			"--backend", "qemu", "--log-level", "debug"})
	}
	r.ready = func() {
		var creds server.Credentials
		eventually(t, 60*time.Second, "dev credentials", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(data, "credentials.json"))
			return err == nil && json.Unmarshal(b, &creds) == nil && creds.Token != "", fmt.Sprint(err)
		})
		r.c = newClient("http://"+addr, creds.Token)
		eventually(t, 120*time.Second, "dev host ready", func() (bool, string) {
			hs, err := r.c.Hosts().List(context.Background())
			return err == nil && len(hs) == 1 && hs[0].State == "ready", fmt.Sprint(hs, err)
		})
	}
}

// spawn starts argv with the pause points armed, logging to logPath.
func (r *crashRig) spawn(argv []string) *exec.Cmd {
	t := r.t
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), pauseEnv+"="+r.pauseFile, "ENGRAMS_CONFIG="+filepath.Join(filepath.Dir(r.pauseFile), "cli.json"))
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	return cmd
}

// kill sends SIGKILL to the agent (the whole dev process) and reaps it.
func (r *crashRig) kill() {
	if r.proc != nil && r.proc.ProcessState == nil {
		_ = r.proc.Process.Kill()
		_ = r.proc.Wait()
	}
}

// killAt arms st's point, runs begin (which starts the operation that
// reaches it), waits until the agent logs that it stopped there, kills it
// with SIGKILL (and session sid's VMM with it, for st.withVMM) and starts
// it again.
func (r *crashRig) killAt(st crashStep, sid string, begin func()) {
	point := st.point
	t := r.t
	before := logCount(r.logPath, "test pause point reached", "point="+point)
	if err := os.WriteFile(r.pauseFile, []byte(point), 0o644); err != nil {
		t.Fatal(err)
	}
	begin()
	eventually(t, 3*time.Minute, "the agent stops at "+point, func() (bool, string) {
		return logCount(r.logPath, "test pause point reached", "point="+point) > before, "not yet"
	})
	r.kill()
	r.kills++
	if st.withVMM {
		for _, pid := range vmmSessions(r.dir)[sid] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		eventually(t, 30*time.Second, "the VMM of "+sid+" is gone", func() (bool, string) {
			left := vmmSessions(r.dir)[sid]
			return len(left) == 0, fmt.Sprint(left)
		})
	}
	t.Logf("killed at %s (VMM too: %v)", point, st.withVMM)
	_ = os.Remove(r.pauseFile)
	r.proc = r.start()
	r.ready()
}

// create makes a session and waits until it is active.
func (r *crashRig) create() string {
	t := r.t
	s, err := r.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v (log %s)", s, err, r.logPath)
	}
	r.live[s.ID] = true
	r.checkVMMs()
	return s.ID
}

// crashCreate deletes session prev (if any), then creates one with the
// agent killed at st, checks it ends active with one VMM and returns it.
func (r *crashRig) crashCreate(st crashStep, prev string) string {
	t := r.t
	if prev != "" {
		r.delete(prev)
	}
	var sid string
	r.killAt(st, "", func() {
		s, err := r.c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, IdleTimeoutSec: -1}}, false)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		sid = s.ID
	})
	r.settleAs(sid, "active", st)
	if out := execOut(t, r.c, sid, "echo ok"); out != "ok" {
		t.Fatalf("after %s: exec said %q", st.point, out)
	}
	return sid
}

// crashLifecycle writes a marker into session sid, then runs st's
// operation with the agent killed at its point: a suspend (from active)
// must end idle, a resume (from idle) active; either way every marker
// written so far must be in the session afterwards.
func (r *crashRig) crashLifecycle(sid string, st crashStep) {
	t := r.t
	ctx := context.Background()
	switch st.op {
	case "suspend":
		r.ensure(sid, "active")
		m := fmt.Sprintf("/root/marker-%d", len(r.markers))
		execOut(t, r.c, sid, "echo "+st.point+" > "+m+" && sync")
		r.markers = append(r.markers, m)
		finished := logCount(r.logPath, finishedLocal)
		r.killAt(st, sid, func() {
			if _, err := r.c.Sessions().Suspend(ctx, sid, false); err != nil {
				t.Fatalf("suspend: %v", err)
			}
		})
		r.settleAs(sid, "idle", st)
		if got := logCount(r.logPath, finishedLocal) > finished; got != st.local {
			t.Fatalf("after a kill at %s: the restarted agent answered from the local files: %v, want %v", st.point, got, st.local)
		}
	case "resume":
		r.ensure(sid, "idle")
		done := make(chan struct{})
		rctx, cancel := context.WithCancel(ctx)
		r.killAt(st, sid, func() {
			go func() { // the exec resumes the session; it may fail when the agent dies under it
				defer close(done)
				_, _ = r.c.Sessions().Exec(rctx, sid, apiv1.ExecRequest{Argv: []string{"true"}}, &bytes.Buffer{}, &bytes.Buffer{})
			}()
		})
		r.settleAs(sid, "active", st)
		cancel()
		<-done
	}
	r.checkMarkers(sid, st)
}

// ensure brings sid to state (active or idle) without faults.
func (r *crashRig) ensure(sid, state string) {
	t := r.t
	s, err := r.c.Sessions().Get(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case s.State == state:
	case state == "active":
		execOut(t, r.c, sid, "true")
		r.live[sid] = true
	case state == "idle":
		if _, err := r.c.Sessions().Suspend(context.Background(), sid, true); err != nil {
			t.Fatalf("suspend: %v", err)
		}
		r.live[sid] = false
	}
	r.checkVMMs()
}

// settleAs waits until sid settles and checks it settled in want, then
// checks the VMM processes.
func (r *crashRig) settleAs(sid, want string, st crashStep) {
	t := r.t
	s := settled(t, r.c, sid, 4*time.Minute)
	if s.State != want {
		t.Fatalf("after a kill at %s (%s, VMM too: %v): %s; want %s", st.point, st.op, st.withVMM, describe(s), want)
	}
	r.live[sid] = want == "active"
	r.checkVMMs()
}

// checkMarkers reads every marker in sid (resuming it if idle).
func (r *crashRig) checkMarkers(sid string, st crashStep) {
	t := r.t
	if len(r.markers) == 0 {
		return
	}
	out := execOut(t, r.c, sid, "for f in "+strings.Join(r.markers, " ")+"; do cat $f 2>/dev/null || echo MISSING $f; done")
	r.live[sid] = true
	if strings.Contains(out, "MISSING") {
		s, _ := r.c.Sessions().Get(context.Background(), sid)
		t.Fatalf("after a kill at %s (%s) files written before a suspend are gone: %q; session %s", st.point, st.op, out, describe(s))
	}
	r.checkVMMs()
}

// delete deletes sid and checks its VMM is gone.
func (r *crashRig) delete(sid string) {
	if err := r.c.Sessions().Delete(context.Background(), sid, true); err != nil {
		r.t.Fatalf("delete %s: %v", sid, err)
	}
	delete(r.live, sid)
	r.checkVMMs()
}

// finish checks every marker once more, deletes the session and checks no
// VMM is left.
func (r *crashRig) finish(sid string) {
	r.checkMarkers(sid, crashStep{point: "none", op: "final"})
	r.delete(sid)
	if left := vmmPIDs(r.dir); len(left) != 0 {
		r.t.Fatalf("VMM processes left under %s: %v", r.dir, left)
	}
}

// checkVMMs scans /proc: every live session has exactly one QEMU process
// and no other QEMU process names this host's data dir. A VMM being
// destroyed may take a moment to exit, so this waits for that; a second
// VMM of one session never goes away by itself.
func (r *crashRig) checkVMMs() {
	t := r.t
	var want []string
	for sid, live := range r.live {
		if live {
			want = append(want, sid)
		}
	}
	sort.Strings(want)
	eventually(t, 30*time.Second, "one VMM per live session "+fmt.Sprint(want), func() (bool, string) {
		got := vmmSessions(r.dir)
		var sids []string
		for sid, pids := range got {
			if len(pids) != 1 {
				return false, fmt.Sprintf("session %s has VMMs %v", sid, pids)
			}
			sids = append(sids, sid)
		}
		sort.Strings(sids)
		return slices.Equal(sids, want), fmt.Sprintf("VMMs by session %v", got)
	})
}

// vmmSessions maps each session with a QEMU process under dataDir's
// machines/ to its pids; a QEMU naming the data dir outside machines/
// (an image capture) is listed under "".
func vmmSessions(dataDir string) map[string][]int {
	out := map[string][]int{}
	prefix := filepath.Join(dataDir, "machines") + "/"
	for _, pid := range vmmPIDs(dataDir) {
		cmd, _ := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cmdline"))
		sid := ""
		if _, rest, ok := strings.Cut(string(cmd), prefix); ok {
			sid, _, _ = strings.Cut(rest, "/")
		}
		out[sid] = append(out[sid], pid)
	}
	return out
}
