package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/vmm/qemu"
)

// s3Bucket is the bucket of every s3Gate.
const s3Bucket = "engrams"

// s3Gate is an S3 server on loopback (gofakes3, in memory) that can
// intercept chunk uploads: once armed, hook runs for every chunk PUT with
// its number (1-based, counted from the arming) and may block it; a hook
// that answers true has refused the PUT, which is then not stored.
type s3Gate struct {
	backend *s3mem.Backend
	next    http.Handler
	url     string

	mu      sync.Mutex
	hook    func(n int) (refused bool)
	puts    int
	getHook func() // runs for every chunk GET while set; may block it
}

func startS3Gate(t *testing.T) *s3Gate {
	t.Helper()
	g := &s3Gate{backend: s3mem.New()}
	if err := g.backend.CreateBucket(s3Bucket); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	g.next = gofakes3.New(g.backend).Server()
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// hostArgs are the `engrams host run` flags that put chunks in this server.
func (g *s3Gate) hostArgs() []string {
	return []string{"--s3-endpoint", strings.TrimPrefix(g.url, "http://"), "--s3-bucket", s3Bucket,
		"--s3-access-key", "k", "--s3-secret-key", "s", "--s3-tls=false"}
}

// arm starts counting chunk PUTs afresh and hands each to hook; nil
// stops.
func (g *s3Gate) arm(hook func(n int) (refused bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hook, g.puts = hook, 0
}

// armGets hands every chunk GET to hook before it is served; nil stops.
func (g *s3Gate) armGets(hook func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.getHook = hook
}

func (g *s3Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/"+chunk.DefaultKeyPrefix+"/") {
		g.mu.Lock()
		hook := g.getHook
		g.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/"+chunk.DefaultKeyPrefix+"/") {
		g.mu.Lock()
		hook := g.hook
		if hook != nil {
			g.puts++
		}
		n := g.puts
		g.mu.Unlock()
		if hook != nil && hook(n) {
			http.Error(w, "refused by the test", http.StatusServiceUnavailable)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// missingChunks lists the chunks named by a snapshot's manifests that the
// bucket lacks.
func (g *s3Gate) missingChunks(t *testing.T, snap domain.Snapshot) []string {
	t.Helper()
	var ms map[string]chunk.Manifest
	if err := json.Unmarshal(snap.Manifests, &ms); err != nil {
		t.Fatalf("manifests of snapshot %s: %v", snap.ID, err)
	}
	var missing []string
	n := 0
	for _, m := range ms {
		for _, r := range m.Chunks {
			if r.IsZero() {
				continue
			}
			n++
			if _, err := g.backend.HeadObject(s3Bucket, chunk.ChunkKey(chunk.DefaultKeyPrefix, r.Hash)); err != nil {
				missing = append(missing, r.Hash)
			}
		}
	}
	if n == 0 {
		t.Fatalf("snapshot %s names no chunk", snap.ID)
	}
	return missing
}

// coordProc is `engrams server` running as its own process.
type coordProc struct {
	cmd *exec.Cmd
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startCoordinator runs `engrams server` on addr over database (an SQLite
// path or a postgres:// URL), logging to logPath, and waits until it
// answers. The test's cleanup stops it unless it was killed.
func startCoordinator(t *testing.T, addr, database, logPath string, extra ...string) *coordProc {
	t.Helper()
	args := append([]string{"server", "--listen", addr, "--database", database, "--log-level", "debug",
		"--advertise-url", "http://" + addr, "--cluster-secret", "e2e-cluster-secret-of-32-characters"}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "engrams"), args...)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("open coordinator log: %v", err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start coordinator: %v", err)
	}
	p := &coordProc{cmd: cmd}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			_ = p.cmd.Wait()
		}
	})
	eventually(t, 30*time.Second, "coordinator answers on "+addr, func() (bool, string) {
		_, err := client.New("http://"+addr, "").Version(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	return p
}

// kill stops the coordinator with SIGKILL and reaps it.
func (p *coordProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// hostLog is where startHostProcess writes the agent's log for dataDir.
func hostLog(dataDir string) string {
	return filepath.Join(dataDir, "..", filepath.Base(dataDir)+".log")
}

// logCount counts the lines of the log at path that contain every one of
// words.
func logCount(path string, words ...string) int {
	b, _ := os.ReadFile(path)
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		all := true
		for _, w := range words {
			all = all && bytes.Contains(line, []byte(w))
		}
		if all && len(line) > 0 {
			n++
		}
	}
	return n
}

// execOut runs script in the session and returns its trimmed stdout; a
// failure or non-zero exit fails the test.
func execOut(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := c.Sessions().Exec(context.Background(), id, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 180000}, &out, &errb)
	if err != nil || code != 0 {
		t.Fatalf("exec %q: code %d, %v, stderr %q", script, code, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// describe renders a session with its ops, for failure messages.
func describe(s apiv1.Session) string {
	var ops []string
	for _, o := range s.Ops {
		ops = append(ops, fmt.Sprintf("%s:%s:%s(attempts %d) %s", o.Kind, o.State, o.Step, o.Attempts, o.Error))
	}
	return fmt.Sprintf("%s on %q (%s), head %s, %d snapshots, ops [%s]", s.State, s.HostID, s.Reason, s.HeadSnapshot,
		len(s.Snapshots), strings.Join(ops, "; "))
}

// settled waits until the session is in a state no op is moving it out
// of (idle, active or dead) with no op pending or running, and returns it.
func settled(t *testing.T, c *client.Client, id string, d time.Duration) apiv1.Session {
	t.Helper()
	var s apiv1.Session
	eventually(t, d, "session "+id+" settles", func() (bool, string) {
		var err error
		s, err = c.Sessions().Get(context.Background(), id)
		if err != nil {
			return false, err.Error()
		}
		busy := slices.ContainsFunc(s.Ops, func(o apiv1.Op) bool { return o.State == "pending" || o.State == "running" })
		return !busy && (s.State == "idle" || s.State == "active" || s.State == "dead"), describe(s)
	})
	return s
}

// noDuplicateSnapshots fails the test if the session's history names a
// snapshot twice or records one capture (same manifests) twice: in these
// tests every capture follows new writes, so no two may be alike.
func noDuplicateSnapshots(t *testing.T, st store.Store, s apiv1.Session) []domain.Snapshot {
	t.Helper()
	rows, err := st.ListSnapshots(context.Background(), domain.SessionID(s.ID))
	if err != nil {
		t.Fatalf("list snapshots: %v", err)
	}
	ids, manifests := map[string]bool{}, map[string]string{}
	for _, sn := range s.Snapshots {
		if ids[sn.ID] {
			t.Fatalf("snapshot %s listed twice in the history of %s", sn.ID, s.ID)
		}
		ids[sn.ID] = true
	}
	for _, r := range rows {
		if prev, ok := manifests[string(r.Manifests)]; ok {
			t.Fatalf("snapshots %s and %s record the same capture", prev, r.ID)
		}
		manifests[string(r.Manifests)] = string(r.ID)
	}
	if len(rows) != len(s.Snapshots) {
		t.Fatalf("store has %d snapshot rows, session get lists %d", len(rows), len(s.Snapshots))
	}
	return rows
}

// machineLive reports whether the machine of session sid under a host's
// data dir may run guest code: for the process backend, some process of
// it is neither stopped nor gone; for QEMU, its VMM answers QMP with a
// running state (a VMM whose QMP socket does not answer counts as live).
func machineLive(backend, dataDir, sid string) (bool, string) {
	mdir := filepath.Join(dataDir, "machines", sid)
	if backend == "qemu" {
		return qemuLive(mdir)
	}
	marker := []byte("ENGRAMS_PROCESS_MACHINE=" + mdir + "\x00")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !(bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...))) {
			continue
		}
		if state, stopped := procStopped(e.Name()); !stopped {
			return true, fmt.Sprintf("pid %s in state %c", e.Name(), state)
		}
	}
	return false, "every process stopped or gone"
}

// procStopped reads /proc/<pid>: a process stopped, gone, or in
// uninterruptible sleep with SIGSTOP pending (it stops on its way back to
// user space) runs no guest code.
func procStopped(pid string) (state byte, stopped bool) {
	st, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	i := bytes.LastIndexByte(st, ')')
	if err != nil || i < 0 || i+2 >= len(st) {
		return 'X', true // gone meanwhile
	}
	state = st[i+2]
	switch state {
	case 'T', 't', 'Z', 'X':
		return state, true
	case 'D':
		status, _ := os.ReadFile(filepath.Join("/proc", pid, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if (k == "SigPnd" || k == "ShdPnd") && err == nil && mask&(1<<(uint(syscall.SIGSTOP)-1)) != 0 {
				return state, true
			}
		}
	}
	return state, false
}

func qemuLive(mdir string) (bool, string) {
	if len(vmmPIDs(mdir)) == 0 {
		return false, "no VMM"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := qemu.DialQMP(ctx, filepath.Join(mdir, "qmp.sock"))
	if err != nil {
		return true, "VMM runs and its QMP does not answer: " + err.Error()
	}
	defer q.Close()
	st, err := q.QueryStatus(ctx)
	if err != nil {
		return true, "query-status: " + err.Error()
	}
	return st.Running, "VMM status " + st.Status
}

// neverTwice watches one session that starts on host `from`.
type neverTwice struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	moved      int      // samples in which the session was away from `from`
	violations []string // samples in which it was also live there
}

// watchNeverTwice samples, every 50 ms, the API's view of session sid and
// of host from, then the machine under fromDir: whenever the host is lost
// or the session is anywhere but active/suspending on it, the machine
// there must not be live. Sampling the API first makes a violation real:
// the machine was live after the session had moved.
func watchNeverTwice(t *testing.T, c *client.Client, sid, from, backend, fromDir string) *neverTwice {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &neverTwice{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			s, err1 := c.Sessions().Get(ctx, sid)
			h, err2 := c.Hosts().Get(ctx, from)
			if err1 == nil && err2 == nil {
				here := s.HostID == from && slices.Contains([]string{"starting", "active", "suspending", "deleting"}, s.State)
				if h.State == "lost" || !here {
					live, why := machineLive(backend, fromDir, sid)
					w.mu.Lock()
					w.moved++
					if live && len(w.violations) < 10 {
						w.violations = append(w.violations, fmt.Sprintf("host %s %s, session %s on %q, but its machine there is live: %s",
							from, h.State, s.State, s.HostID, why))
					}
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// stop ends the watch, fails the test on any violation and returns how
// many samples saw the session away from its first host.
func (w *neverTwice) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Fatalf("session live on two hosts:\n%s", strings.Join(w.violations, "\n"))
	}
	return w.moved
}
