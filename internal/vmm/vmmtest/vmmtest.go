package vmmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// Harness adapts one backend to the suite.
type Harness struct {
	// New returns a fresh Backend value. The suite calls it again to play a
	// host agent that restarted (for Recover).
	New func(t *testing.T) vmm.Backend
	// Spec returns a spec for a new machine with its own Dir (optional: the
	// suite builds one in a short temporary directory otherwise).
	Spec func(t *testing.T) vmm.Spec
	// Timeout bounds each boot, restore, recover and destroy, and each guest
	// call. Zero means 60s (software-emulated guests boot in seconds).
	Timeout time.Duration
	// InfoFile is the file, relative to Spec.Dir, where the backend persists
	// vmm.Info; Destroy must remove it. Empty means "machine.json".
	InfoFile string
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 60 * time.Second
}

func (h Harness) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	t.Cleanup(cancel)
	return ctx
}

func (h Harness) spec(t *testing.T) vmm.Spec {
	if h.Spec != nil {
		return h.Spec(t)
	}
	// Short paths: Unix socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "vmmtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return vmm.Spec{
		SessionID: "vmmtest-" + filepath.Base(dir),
		Epoch:     1,
		Dir:       dir,
		MemoryMiB: 256,
		VCPUs:     1,
		Env:       map[string]string{"VMMTEST_SPEC_ENV": "from-spec"},
		Hostname:  "vmmtest",
	}
}

func (h Harness) infoFile() string {
	if h.InfoFile != "" {
		return h.InfoFile
	}
	return "machine.json"
}

// guest is a booted machine and a client to it.
type guest struct {
	m    vmm.Machine
	c    *guestapi.Client
	work string   // the daemon's working directory
	spec vmm.Spec // what it was booted or restored with
}

// Run runs the suite. Steps depend on each other, so it stops at the first
// failing step.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("vmmtest: Harness.New is nil")
	}
	b := h.New(t)
	caps := b.Capabilities()
	t.Logf("backend %s %s acceleration=%s isolation=%v snapshot memory=%v disk=%v: %s",
		caps.Name, caps.Version, caps.Acceleration, caps.Isolation, caps.SnapshotMemory, caps.SnapshotDisk, caps.Reason)
	if caps.Name == "" {
		t.Error("Capabilities().Name is empty")
	}
	if !caps.Isolation && caps.Reason == "" {
		t.Error("a backend without isolation must say so in Capabilities().Reason")
	}

	if !caps.RootFS {
		mustStep(t, "root filesystem unsupported", func(t *testing.T) { h.checkNoRootFS(t, b) })
	}

	spec := h.spec(t)
	g := h.boot(t, b, spec)
	g.spec = spec
	t.Cleanup(func() { _ = g.m.Destroy(context.Background()) })
	mustStep(t, "ready", func(t *testing.T) { h.checkReady(t, g) })
	mustStep(t, "found by its marker", func(t *testing.T) { h.checkFound(t, b, g.m.Info(), true) })
	mustStep(t, "exec", func(t *testing.T) { h.checkExec(t, g) })
	mustStep(t, "files", func(t *testing.T) { h.checkFiles(t, g) })
	var bg background
	mustStep(t, "background process", func(t *testing.T) { bg = h.startBackground(t, g) })
	mustStep(t, "pause and resume", func(t *testing.T) { h.checkPause(t, g) })

	if caps.SnapshotMemory || caps.SnapshotDisk {
		parent := t
		mustStep(t, "snapshot and resume", func(t *testing.T) { h.snapshotResume(t, g) })
		mustStep(t, "snapshot and restore", func(t *testing.T) {
			spec := h.spec(parent) // the restored machine outlives this step
			g = h.snapshotRestore(t, b, g, bg, caps, spec)
			parent.Cleanup(func() { _ = g.m.Destroy(context.Background()) })
		})
	} else {
		t.Logf("snapshot and restore skipped: backend %s snapshots neither memory nor disk (%s)", caps.Name, caps.Reason)
	}
	mustStep(t, "recover and destroy", func(t *testing.T) { h.recoverAndDestroy(t, g) })
}

// checkNoRootFS checks a backend without Capabilities.RootFS refuses a
// caller's root filesystem with ErrUnsupported, at boot and at restore.
func (h Harness) checkNoRootFS(t *testing.T, b vmm.Backend) {
	root := &vmm.RootFS{Path: filepath.Join(t.TempDir(), "root.ext4"), ID: "sha256:vmmtest"}
	if err := os.WriteFile(root.Path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	caps := b.Capabilities()
	for _, op := range []string{"boot", "restore"} {
		spec := h.spec(t)
		spec.RootFS = root
		var m vmm.Machine
		var err error
		if op == "boot" {
			m, err = b.Boot(h.ctx(t), spec)
		} else {
			m, err = b.Restore(h.ctx(t), spec, vmm.Snapshot{Backend: caps.Name, Files: map[string]string{}})
		}
		if m != nil {
			_ = m.Destroy(context.Background())
		}
		if !errors.Is(err, vmm.ErrUnsupported) {
			t.Errorf("%s with Spec.RootFS on a backend without Capabilities.RootFS = %v, want ErrUnsupported", op, err)
		}
	}
}

func mustStep(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

func (h Harness) boot(t *testing.T, b vmm.Backend, spec vmm.Spec) guest {
	t.Helper()
	began := time.Now()
	m, err := b.Boot(h.ctx(t), spec)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	t.Logf("booted in %v", time.Since(began).Round(time.Millisecond))
	return h.attach(t, m)
}

func (h Harness) attach(t *testing.T, m vmm.Machine) guest {
	t.Helper()
	c := guestapi.NewClient(m.Dial)
	t.Cleanup(c.Close)
	g := guest{m: m, c: c}
	out, exit := run(t, h, g, guestapi.ExecStart{Argv: []string{"pwd"}}, "")
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "/") {
		t.Fatalf("pwd = %q, %+v", out, exit)
	}
	g.work = strings.TrimSpace(out)
	return g
}

// run executes a command and fails the test on a transport error.
func run(t *testing.T, h Harness, g guest, start guestapi.ExecStart, stdin string) (string, guestapi.Control) {
	t.Helper()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	exit, err := g.c.Exec(h.ctx(t), start, in, &out, &out)
	if err != nil {
		t.Fatalf("exec %q: %v", start.Argv, err)
	}
	return out.String(), exit
}

func sh(script string) guestapi.ExecStart {
	return guestapi.ExecStart{Argv: []string{"sh", "-c", script}}
}

func (h Harness) checkReady(t *testing.T, g guest) {
	r, err := g.c.Ready(h.ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != guestapi.Version || r.PID <= 0 || r.Kernel == "" {
		t.Errorf("ready = %+v", r)
	}
	select {
	case <-g.m.Done():
		t.Error("Done closed on a running machine")
	default:
	}
	if info := g.m.Info(); info.PID <= 0 || info.Dir == "" {
		t.Errorf("info = %+v", info)
	}
}

func (h Harness) checkExec(t *testing.T, g guest) {
	big := strings.Repeat("vmmtest-stdin-", 20000)
	tests := []struct {
		name     string
		start    guestapi.ExecStart
		stdin    string
		want     string // combined stdout+stderr
		wantCode int
		timedOut bool
	}{
		{name: "stdout", start: guestapi.ExecStart{Argv: []string{"echo", "hello"}}, want: "hello\n"},
		{name: "stderr", start: sh("echo to-stderr >&2"), want: "to-stderr\n"},
		{name: "exit code", start: sh("exit 3"), wantCode: 3},
		{name: "stdin", start: guestapi.ExecStart{Argv: []string{"cat"}}, stdin: "line one\nline two\n", want: "line one\nline two\n"},
		{name: "big stdin", start: guestapi.ExecStart{Argv: []string{"cat"}}, stdin: big, want: big},
		{name: "env", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "echo $VMMTEST_VAR"}, Env: map[string]string{"VMMTEST_VAR": "v1"}}, want: "v1\n"},
		{name: "dir", start: guestapi.ExecStart{Argv: []string{"pwd"}, Dir: "/"}, want: "/\n"},
		{name: "timeout", start: guestapi.ExecStart{Argv: []string{"sleep", "30"}, TimeoutMS: 500}, wantCode: 137, timedOut: true},
		{name: "tty size", start: guestapi.ExecStart{Argv: []string{"stty", "size"}, TTY: true, Rows: 40, Cols: 100}, want: "40 100\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, exit := run(t, h, g, tt.start, tt.stdin)
			if out != tt.want || exit.ExitCode != tt.wantCode || exit.TimedOut != tt.timedOut {
				t.Errorf("got %.100q %+v; want %.100q code %d timed_out %v", out, exit, tt.want, tt.wantCode, tt.timedOut)
			}
		})
	}
	t.Run("spec env", func(t *testing.T) {
		t.Parallel()
		for k, v := range g.spec.Env {
			if k == "PATH" {
				continue
			}
			out, _ := run(t, h, g, sh(`printf %s "$`+k+`"`), "")
			if out != v {
				t.Errorf("Spec.Env %s = %q in commands, want %q", k, out, v)
			}
		}
	})
	t.Run("tty resize", func(t *testing.T) {
		t.Parallel()
		h.checkResize(t, g)
	})
}

func (h Harness) checkResize(t *testing.T, g guest) {
	ctx := h.ctx(t)
	p, err := g.c.Start(ctx, guestapi.ExecStart{
		Argv: []string{"sh", "-c", "echo ready; read x; stty size"}, TTY: true, Stdin: true, Rows: 24, Cols: 80,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := &watchWriter{want: "ready", seen: make(chan struct{})}
	type result struct {
		exit guestapi.Control
		err  error
	}
	done := make(chan result, 1)
	go func() {
		exit, err := p.Wait(out, out)
		done <- result{exit, err}
	}()
	select {
	case <-out.seen:
	case r := <-done:
		t.Fatalf("exited before reading: %+v %v %q", r.exit, r.err, out.String())
	case <-ctx.Done():
		t.Fatal("no output from the terminal")
	}
	if err := p.Resize(50, 120); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.exit.ExitCode != 0 || !strings.Contains(out.String(), "50 120") {
		t.Errorf("after resize: %+v %v %q, want \"50 120\"", r.exit, r.err, out.String())
	}
}

func (h Harness) checkFiles(t *testing.T, g guest) {
	ctx := h.ctx(t)
	dir := g.work + "/vmmtest-files"
	p := dir + "/sub/data.bin"
	data := bytes.Repeat([]byte{0, 1, 2, 3, 254, 255}, 50000)
	if err := g.c.Upload(ctx, p, 0o640, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	rc, err := g.c.Download(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("download: %d bytes (want %d), %v", len(got), len(data), err)
	}
	fi, err := g.c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != int64(len(data)) || fi.Mode != "-rw-r-----" || fi.IsDir {
		t.Errorf("stat = %+v", fi)
	}
	list, err := g.c.List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "sub" || !list[0].IsDir {
		t.Errorf("list = %+v", list)
	}
	out, exit := run(t, h, g, sh("wc -c < "+p), "")
	if exit.ExitCode != 0 || strings.TrimSpace(out) != strconv.Itoa(len(data)) {
		t.Errorf("wc -c in the guest = %q %+v", out, exit)
	}
	if _, err := g.c.Stat(ctx, dir+"/missing"); !errors.Is(err, guestapi.ErrNotFound) {
		t.Errorf("stat missing = %v, want ErrNotFound", err)
	}
	if err := g.c.Upload(ctx, g.work+"/snapshot-marker.txt", 0o644, strings.NewReader("kept on disk\n")); err != nil {
		t.Fatal(err)
	}
}

// background is a process keeping a counter in memory and writing it out.
type background struct {
	pid   int
	count int
}

const bgScript = `i=0; echo $$ > vmmtest-bg.pid; while :; do i=$((i+1)); echo $i > vmmtest-bg.count.tmp; mv vmmtest-bg.count.tmp vmmtest-bg.count; sleep 0.1; done`

func (h Harness) startBackground(t *testing.T, g guest) background {
	out, exit := run(t, h, g, sh("sh -c '"+bgScript+"' </dev/null >/dev/null 2>&1 &"), "")
	if exit.ExitCode != 0 {
		t.Fatalf("start background: %q %+v", out, exit)
	}
	var bg background
	h.poll(t, "background counter reaches 3", func() bool {
		bg = h.readBackground(t, g)
		return bg.pid > 0 && bg.count >= 3
	})
	return bg
}

func (h Harness) readBackground(t *testing.T, g guest) background {
	out, _ := run(t, h, g, sh("cat vmmtest-bg.pid; cat vmmtest-bg.count"), "")
	var bg background
	_, _ = fmt.Sscan(out, &bg.pid, &bg.count)
	return bg
}

func processRunning(t *testing.T, h Harness, g guest, pid int) bool {
	_, exit := run(t, h, g, sh("kill -0 "+strconv.Itoa(pid)), "")
	return exit.ExitCode == 0
}

// poll retries cond until it holds or the harness timeout passes.
func (h Harness) poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(h.timeout())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h Harness) snapshotRestore(t *testing.T, b vmm.Backend, g guest, bg background, caps vmm.Capabilities, spec vmm.Spec) guest {
	snapDir, err := os.MkdirTemp("", "vmmtest-snap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(snapDir) })
	h.applyOutbox(t, g)
	before := h.readBackground(t, g)
	began := time.Now()
	snap, err := g.m.Snapshot(h.ctx(t), snapDir)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Logf("snapshot in %v: %v", time.Since(began).Round(time.Millisecond), snap.Files)
	if snap.Backend != caps.Name || len(snap.Files) == 0 {
		t.Errorf("snapshot = %+v", snap)
	}
	for role, p := range snap.Files {
		if _, err := os.Stat(p); err != nil || !strings.HasPrefix(p, snapDir) {
			t.Errorf("snapshot file %s = %s: must exist inside %s (%v)", role, p, snapDir, err)
		}
	}
	oldInfo := g.m.Info()
	if err := g.m.Destroy(h.ctx(t)); err != nil {
		t.Fatalf("destroy after snapshot: %v", err)
	}
	h.checkDestroyed(t, g.m, oldInfo)
	if _, err := h.New(t).Recover(h.ctx(t), oldInfo.Dir); !errors.Is(err, vmm.ErrGone) {
		t.Errorf("recover of a destroyed machine = %v, want ErrGone", err)
	}
	for role, p := range snap.Files {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("destroy removed snapshot file %s: %v", role, err)
		}
	}
	snap = relocate(t, snap, snapDir, oldInfo.Dir)

	began = time.Now()
	m, err := b.Restore(h.ctx(t), spec, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restored in %v", time.Since(began).Round(time.Millisecond))
	ng := h.attach(t, m)
	ng.spec = spec
	if ng.work != g.work {
		t.Logf("working directory moved across restore: %s -> %s", g.work, ng.work)
	}
	if caps.SnapshotDisk || caps.SnapshotMemory {
		out, exit := run(t, h, ng, guestapi.ExecStart{Argv: []string{"cat", ng.work + "/snapshot-marker.txt"}}, "")
		if exit.ExitCode != 0 || out != "kept on disk\n" {
			t.Errorf("uploaded file after restore: %q %+v", out, exit)
		}
	}
	if caps.SnapshotMemory {
		if !processRunning(t, h, ng, bg.pid) {
			t.Fatalf("background process %d not running after a memory restore", bg.pid)
		}
		h.poll(t, "the background counter continues past its snapshot value", func() bool {
			now := h.readBackground(t, ng)
			return now.pid == bg.pid && now.count > before.count
		})
	} else {
		t.Log("memory not snapshotted: background process continuity not checked")
	}
	h.checkOutboxRestored(t, ng)
	out, exit := run(t, h, ng, sh("echo restored; exit 5"), "")
	if out != "restored\n" || exit.ExitCode != 5 {
		t.Errorf("exec after restore: %q %+v", out, exit)
	}
	return ng
}

func (h Harness) recoverAndDestroy(t *testing.T, g guest) {
	info := g.m.Info()
	b2 := h.New(t) // a host agent that restarted
	m2, err := b2.Recover(h.ctx(t), info.Dir)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if got := m2.Info(); got.PID != info.PID || got.Dir != info.Dir {
		t.Errorf("recovered info = %+v, want pid %d dir %s", got, info.PID, info.Dir)
	}
	rg := guest{m: m2, c: guestapi.NewClient(m2.Dial), work: g.work}
	defer rg.c.Close()
	out, exit := run(t, h, rg, sh("echo recovered"), "")
	if out != "recovered\n" || exit.ExitCode != 0 {
		t.Errorf("exec through the recovered machine: %q %+v", out, exit)
	}
	select {
	case <-m2.Done():
		t.Error("Done closed on a recovered, running machine")
	default:
	}
	if err := m2.Destroy(h.ctx(t)); err != nil {
		t.Fatalf("destroy the recovered machine: %v", err)
	}
	h.checkDestroyed(t, m2, info)
	select {
	case <-g.m.Done(): // the first handle sees the exit too
	case <-h.ctx(t).Done():
		t.Error("the original handle's Done did not close after Destroy")
	}
	if err := g.m.Destroy(h.ctx(t)); err != nil {
		t.Errorf("second Destroy (idempotent): %v", err)
	}
	if _, err := h.New(t).Recover(h.ctx(t), info.Dir); !errors.Is(err, vmm.ErrGone) {
		t.Errorf("recover after destroy = %v, want ErrGone", err)
	}
}

// checkDestroyed asserts a destroyed machine left no process, socket or
// info file, and that Done is closed.
func (h Harness) checkDestroyed(t *testing.T, m vmm.Machine, info vmm.Info) {
	t.Helper()
	select {
	case <-m.Done():
	case <-h.ctx(t).Done():
		t.Error("Done not closed after Destroy")
	}
	if info.PID > 0 {
		h.poll(t, fmt.Sprintf("pid %d is gone", info.PID), func() bool { return !pidRunning(info.PID, info.StartTime) })
	}
	if info.Socket != "" {
		if _, err := os.Lstat(info.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s left after Destroy (%v)", info.Socket, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(info.Dir, h.infoFile())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Destroy (%v)", h.infoFile(), err)
	}
	h.checkFound(t, h.New(t), info, false)
	if err := m.Destroy(h.ctx(t)); err != nil {
		t.Errorf("Destroy again: %v", err)
	}
}

// checkFound checks, for a backend that is a vmm.Reaper, that listing the
// VMMs under the machine dir's parent finds the machine's VMM (one spawn,
// with its pid and start time) while it runs, and nothing for its dir
// once it is destroyed.
func (h Harness) checkFound(t *testing.T, b vmm.Backend, info vmm.Info, running bool) {
	t.Helper()
	r, ok := b.(vmm.Reaper)
	if !ok {
		t.Logf("backend %s is no vmm.Reaper: its Recover alone reaps what it left", b.Capabilities().Name)
		return
	}
	vs, err := r.VMMs(h.ctx(t), filepath.Dir(info.Dir))
	if err != nil {
		t.Fatalf("VMMs: %v", err)
	}
	abs, _ := filepath.Abs(info.Dir)
	var mine []vmm.VMM
	for _, v := range vs {
		if v.Dir == abs {
			mine = append(mine, v)
		}
	}
	own := vmm.Process{PID: info.PID, StartTime: info.StartTime}
	switch {
	case running && (len(mine) != 1 || !slices.Contains(mine[0].Processes, own)):
		t.Errorf("VMMs under %s = %+v, want one spawn for %s with pid %d", filepath.Dir(info.Dir), vs, abs, info.PID)
	case !running && len(mine) != 0:
		t.Errorf("VMMs of %s after Destroy = %+v, want none", abs, mine)
	}
}

// pidRunning reports whether pid exists, is not a zombie, and (if start is
// known) started at start.
func pidRunning(pid int, start uint64) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil && !errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	return start == 0 || f[19] == strconv.FormatUint(start, 10)
}

// watchWriter records output and closes seen once it contains want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
