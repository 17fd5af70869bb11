package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/server"
)

// TestBenchFoundation measures the foundation on the process backend with
// the coordinator and host agent as separate processes, and prints a table.
// It runs only with ENGRAMS_BENCH=1 (ENGRAMS_BENCH_SESSIONS sets the fleet
// size, default 1000): figures come from here, never from assertions.
func TestBenchFoundation(t *testing.T) {
	requireBench(t)
	fleet := 1000
	if v, err := strconv.Atoi(os.Getenv("ENGRAMS_BENCH_SESSIONS")); err == nil && v > 0 {
		fleet = v
	}
	ctx := context.Background()
	dir := shortTempDir(t)
	url, srv := startServerProcess(t, dir)
	st, err := openSQLiteFile(filepath.Join(dir, "db")) // beside the server, as an admin would
	if err != nil {
		t.Fatal(err)
	}
	creds, err := server.EnsureCredentials(ctx, st, filepath.Join(dir, "creds.json"), "bench")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	hostDir := filepath.Join(dir, "host")
	os.MkdirAll(hostDir, 0o700)
	hp := startHostProcess(t, url, creds.HostToken, hostDir, "--memory-mib", "10000000", "--vcpus", "100000", "--log-level", "warn")
	c := client.New(url, creds.Token)
	eventually(t, 30*time.Second, "host ready", func() (bool, string) {
		h, err := c.Hosts().Get(ctx, creds.HostID)
		return err == nil && h.State == "ready", h.State
	})

	tb := &benchTable{Started: time.Now()}
	// create → Active, sequential.
	createLat, ids := benchCreates(t, c, 30)
	tb.durations(groupCreate, "create → active (API, wait)", createLat, "", "")
	benchExec(t, c, tb, ids[0], filepath.Join(hostDir, "machines", ids[0], "guest.sock"))
	benchDevExec(t, tb)
	for _, id := range ids {
		if err := c.Sessions().Delete(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}

	// A fleet: create, hold, delete, with 16 clients at a time.
	peak := &peakRSS{pids: map[string]int{"coordinator": srv.Process.Pid, "host agent": hp.cmd.Process.Pid}}
	f := benchFleet(t, c, fleet, peak)
	printFoundationBench(tb, f, peak)
}

// benchCreates creates n sessions one after another, each waited for
// until active, and returns the latencies and the sessions.
func benchCreates(t *testing.T, c *client.Client, n int) ([]time.Duration, []string) {
	t.Helper()
	var lat []time.Duration
	var ids []string
	for range n {
		t0 := time.Now()
		s, err := c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64}}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("create: %+v %v", s, err)
		}
		lat = append(lat, time.Since(t0))
		ids = append(ids, s.ID)
	}
	return lat, ids
}

// fleetRun is what benchFleet measured.
type fleetRun struct {
	n                      int
	createTook, deleteTook time.Duration    // by the whole fleet
	held                   map[string]int64 // RSS by process with the fleet active
}

// benchFleet creates n sessions with 16 clients at a time, samples peak's
// processes while they are held, then deletes them the same way.
func benchFleet(t *testing.T, c *client.Client, n int, peak *peakRSS) fleetRun {
	t.Helper()
	ctx := context.Background()
	stop := peak.sample()
	t0 := time.Now()
	fleetIDs := parallel(t, n, 16, func(int) string {
		s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64}}, true)
		if err != nil || s.State != "active" {
			t.Errorf("fleet create: %+v %v", s, err)
		}
		return s.ID
	})
	f := fleetRun{n: n, createTook: time.Since(t0), held: peak.now()}
	t0 = time.Now()
	parallel(t, n, 16, func(i int) string {
		if err := c.Sessions().Delete(ctx, fleetIDs[i], true); err != nil {
			t.Errorf("fleet delete: %v", err)
		}
		return ""
	})
	f.deleteTook = time.Since(t0)
	stop()
	return f
}

// printFoundationBench prints the foundation benchmark's table of rows
// and the fleet's figures.
func printFoundationBench(tb *benchTable, f fleetRun, peak *peakRSS) {
	var b strings.Builder
	tb.resolve()
	fmt.Fprintf(&b, "\nfoundation benchmark (process backend, SQLite, coordinator and host agent as separate processes)\n%s", tb)
	fmt.Fprintf(&b, "\nfleet of %d sessions (16 concurrent clients, each waits for active/completed)\n", f.n)
	fmt.Fprintf(&b, "  create: %s total, %.0f sessions/s\n", f.createTook.Round(time.Millisecond), float64(f.n)/f.createTook.Seconds())
	fmt.Fprintf(&b, "  delete: %s total, %.0f sessions/s\n", f.deleteTook.Round(time.Millisecond), float64(f.n)/f.deleteTook.Seconds())
	for _, name := range []string{"coordinator", "host agent"} {
		fmt.Fprintf(&b, "  %-12s RSS with %d sessions active: %6.1f MiB; peak over the run: %6.1f MiB\n", name, f.n, mib(f.held[name]), mib(peak.max[name]))
	}
	fmt.Print(b.String())
}

// benchExec measures exec round trips of session id through the whole path
// and on its guest's own socket (sock): plain POST first, then WebSocket
// (an upgrade per call).
func benchExec(t *testing.T, c *client.Client, tb *benchTable, id, sock string) {
	t.Helper()
	ctx := context.Background()
	execRows(tb, "", execRounds(t, c, id, sock, 500))
	gc := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "unix", sock) })
	var viaWS, directWS []time.Duration
	for range 200 {
		t0 := time.Now()
		if ctl, err := c.Sessions().ExecWS(ctx, id, apiv1.ExecStart{Argv: []string{"true"}}, nil, io.Discard, io.Discard, nil); err != nil || ctl.ExitCode != 0 {
			t.Fatalf("exec ws: %+v %v", ctl, err)
		}
		viaWS = append(viaWS, time.Since(t0))
		t0 = time.Now()
		if ctl, err := gc.Exec(ctx, guestapi.ExecStart{Argv: []string{"true"}}, nil, io.Discard, io.Discard); err != nil || ctl.ExitCode != 0 {
			t.Fatalf("direct exec: %+v %v", ctl, err)
		}
		directWS = append(directWS, time.Since(t0))
	}
	tb.durations(groupExec, "exec `true` via API (WebSocket)", viaWS, "WebSocket exec on guest socket", "")
	tb.durations(groupExec, "WebSocket exec on guest socket", directWS, "", "guest daemon alone")
}

// execRows adds the rows of execRounds' figures, their names after prefix.
func execRows(tb *benchTable, prefix string, r rounds) {
	guest, fork := prefix+"POST exec on guest socket", prefix+"fork+exec `true` here"
	tb.durations(groupExec, prefix+"exec `true` via API (POST, NDJSON)", r.viaAPI, guest,
		fmt.Sprintf("%.2fx fork+exec", ratio(r.viaAPI, r.fork)))
	tb.durations(groupExec, guest, r.direct, fork, "guest daemon alone")
	tb.durations(groupExec, fork, r.fork, "", "no engrams")
}

// benchDevExec measures exec round trips against `engrams dev`: the
// coordinator and host agent in one process, as the process backend
// (development only) is meant to run.
func benchDevExec(t *testing.T, tb *benchTable) {
	t.Helper()
	ctx := context.Background()
	dir := shortTempDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, _ := os.Create(filepath.Join(dir, "dev.log"))
	cmd := exec.Command(filepath.Join(binDir, "engrams"), "dev", "--listen", addr, "--data-dir", filepath.Join(dir, "data"),
		"--backend", "process", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "ENGRAMS_CONFIG="+filepath.Join(dir, "cli.json"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
		killGuests(filepath.Join(dir, "data", "host"))
	})
	var creds server.Credentials
	eventually(t, 30*time.Second, "dev credentials", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, "data", "credentials.json"))
		return err == nil && json.Unmarshal(b, &creds) == nil && creds.Token != "", fmt.Sprint(err)
	})
	c := client.New("http://"+addr, creds.Token)
	var s apiv1.Session
	eventually(t, 30*time.Second, "dev session active", func() (bool, string) {
		s, err = c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64}}, true)
		return err == nil && s.State == "active", fmt.Sprint(err)
	})
	execRows(tb, "`engrams dev`: ", execRounds(t, c, s.ID, filepath.Join(dir, "data", "host", "machines", s.ID, "guest.sock"), 500))
}

// rounds are execRounds' figures.
type rounds struct{ viaAPI, direct, fork []time.Duration }

// execRounds times n rounds of `true` through the API (POST exec of session
// id), on the guest's own socket (sock), and with a bare fork+exec here. The
// three take turns so that the machine's drift hits them alike.
func execRounds(t *testing.T, c *client.Client, id, sock string, n int) (r rounds) {
	t.Helper()
	guestHTTP := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for range n {
		t0 := time.Now()
		if code, err := c.Sessions().Exec(context.Background(), id, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil || code != 0 {
			t.Fatalf("exec: %d %v", code, err)
		}
		r.viaAPI = append(r.viaAPI, time.Since(t0))
		t0 = time.Now()
		execRunDirect(t, guestHTTP)
		r.direct = append(r.direct, time.Since(t0))
		t0 = time.Now()
		if err := exec.Command("true").Run(); err != nil {
			t.Fatal(err)
		}
		r.fork = append(r.fork, time.Since(t0))
	}
	return r
}

// execRunDirect runs `true` with a plain POST on the guest's own socket.
func execRunDirect(t *testing.T, hc *http.Client) {
	t.Helper()
	resp, err := hc.Post("http://guest"+guestapi.PathExecRun, "application/json", strings.NewReader(`{"argv":["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"exit"`) {
		t.Fatalf("direct exec: %d %q %v", resp.StatusCode, b, err)
	}
}

// startServerProcess runs `engrams server` on an SQLite file in dir, with
// extra flags, until the test ends.
func startServerProcess(t *testing.T, dir string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, _ := os.Create(filepath.Join(dir, "server.log"))
	cmd := exec.Command(filepath.Join(binDir, "engrams"), append([]string{"server", "--listen", addr, "--database", filepath.Join(dir, "db"), "--log-level", "warn"}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait(); logf.Close() })
	url := "http://" + addr
	eventually(t, 20*time.Second, "server up", func() (bool, string) {
		_, err := client.New(url, "").Version(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	return url, cmd
}

// parallel runs fn(i) for i in [0,n) on workers goroutines and collects results.
func parallel(t *testing.T, n, workers int, fn func(i int) string) []string {
	t.Helper()
	out := make([]string, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

type peakRSS struct {
	mu   sync.Mutex
	pids map[string]int
	max  map[string]int64
}

func (p *peakRSS) now() map[string]int64 {
	out := map[string]int64{}
	for name, pid := range p.pids {
		out[name] = rssBytes(pid)
	}
	return out
}

func (p *peakRSS) sample() (stop func()) {
	p.max = map[string]int64{}
	return every(50*time.Millisecond, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for name, v := range p.now() {
			p.max[name] = max(p.max[name], v)
		}
	})
}

// rssBytes reads VmRSS of pid.
func rssBytes(pid int) int64 { return statusBytes(pid, "VmRSS:") }

// statusBytes reads a "<field> N kB" line of /proc/<pid>/status in bytes.
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// pct is the p-th percentile (nearest rank) of v.
func pct[T cmp.Ordered](v []T, p int) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ratio(a, b []time.Duration) float64 { return float64(pct(a, 50)) / float64(pct(b, 50)) }
func mib(b int64) float64                { return float64(b) / (1 << 20) }
