package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/server"
)

// devProc is `engrams dev` running as its own process.
type devProc struct {
	cmd    *exec.Cmd
	url    string
	data   string // its --data-dir
	stderr string // where its stderr (logs, progress of stopping) goes
	stdout string // where its stdout (the URL, token and dashboard login link) goes
	c      *client.Client
	tok    string // its API token
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startDev runs `engrams dev` on a free port over data with backend and
// waits until it answers with its token. The test's cleanup stops it and
// kills any machine it left.
func startDev(t *testing.T, data, backend string, extra ...string) *devProc {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"dev", "--listen", addr, "--data-dir", data, "--backend", backend, "--log-level", "warn"}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "engrams"), args...)
	cmd.Env = append(os.Environ(), "ENGRAMS_CONFIG="+filepath.Join(filepath.Dir(data), "cli.json"))
	p := &devProc{cmd: cmd, url: "http://" + addr, data: data, exited: make(chan struct{})}
	p.stderr = filepath.Join(filepath.Dir(data), fmt.Sprintf("dev-%d.log", time.Now().UnixNano()))
	logf, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p.stdout = strings.TrimSuffix(p.stderr, ".log") + ".out"
	outf, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outf.Close() })
	cmd.Stdout, cmd.Stderr = outf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start engrams dev: %v", err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		killGuests(filepath.Join(data, "host"))
	})
	var creds server.Credentials
	eventually(t, 180*time.Second, "engrams dev answers", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(data, "credentials.json"))
		if err != nil || json.Unmarshal(b, &creds) != nil || creds.Token == "" {
			return false, fmt.Sprint(err)
		}
		p.c, p.tok = client.New(p.url, creds.Token), creds.Token
		h, err := p.c.Hosts().Get(context.Background(), creds.HostID)
		return err == nil && h.State == "ready", fmt.Sprint(h.State, err)
	})
	return p
}

// token is dev's API token.
func (p *devProc) token(t *testing.T) string {
	t.Helper()
	if p.tok == "" {
		t.Fatal("engrams dev has no token yet")
	}
	return p.tok
}

// loginLink is the dashboard login link dev printed.
func (p *devProc) loginLink(t *testing.T) string {
	t.Helper()
	var link string
	eventually(t, 30*time.Second, "dev prints its dashboard link", func() (bool, string) {
		b, _ := os.ReadFile(p.stdout)
		for _, f := range strings.Fields(string(b)) {
			if strings.Contains(f, "/login#code=") {
				link = f
				return true, ""
			}
		}
		return false, string(b)
	})
	return link
}

// stop sends sig and waits (bounded) for dev to exit; it returns how it
// exited and what it wrote to stderr.
func (p *devProc) stop(t *testing.T, sig syscall.Signal) (log string, err error) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return p.wait(t)
}

func (p *devProc) wait(t *testing.T) (log string, err error) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Minute):
		t.Fatalf("engrams dev did not exit; its stderr: %s", p.log())
	}
	return p.log(), p.err
}

func (p *devProc) log() string {
	b, _ := os.ReadFile(p.stderr)
	return string(b)
}

// scrape reads url's /metrics.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// metric is the value of one series (name with its labels, as
// exposed) in a scrape; -1 when absent.
func metric(body, series string) float64 {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestDevMetricsMove: the engrams_ families of a dev process move as a
// session is created, suspended and resumed: ops by kind and outcome,
// sessions by state, bytes uploaded, chunk cache reads, host links; the
// probes answer on the main listener and on --ops-addr.
func TestDevMetricsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := freeAddr(t)
	dev := startDev(t, filepath.Join(shortTempDir(t), "d"), "process", "--ops-addr", ops)
	for _, u := range []string{dev.url, "http://" + ops} {
		for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ok\n"} {
			resp, err := http.Get(u + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != want {
				t.Fatalf("GET %s%s = %d %q", u, path, resp.StatusCode, b)
			}
		}
	}
	count := func(body, kind string) float64 {
		return metric(body, fmt.Sprintf(`engrams_op_duration_seconds_count{kind=%q,outcome="succeeded"}`, kind))
	}
	cacheReads := func(body string) float64 {
		return metric(body, `engrams_chunk_cache_requests_total{result="hit"}`) + metric(body, `engrams_chunk_cache_requests_total{result="miss"}`)
	}
	s, err := dev.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	execOut(t, dev.c, s.ID, "head -c 300000 /dev/urandom > data.bin") // something for the snapshot to upload
	m := scrape(t, "http://"+ops)
	if count(m, "create") != 1 || metric(m, `engrams_sessions{state="active"}`) != 1 || metric(m, "engrams_host_links") != 1 {
		t.Fatalf("after create: create ops %v, active %v, host links %v", count(m, "create"),
			metric(m, `engrams_sessions{state="active"}`), metric(m, "engrams_host_links"))
	}
	uploaded, reads := metric(m, "engrams_snapshot_uploaded_bytes_total"), cacheReads(m)
	if s, err = dev.c.Sessions().Suspend(ctx, s.ID, true); err != nil || s.State != "idle" {
		t.Fatalf("suspend: %+v %v", s, err)
	}
	m = scrape(t, dev.url)
	if count(m, "evict") != 1 || metric(m, `engrams_sessions{state="idle"}`) != 1 || metric(m, `engrams_sessions{state="active"}`) != 0 {
		t.Fatalf("after suspend: evict ops %v, idle %v, active %v", count(m, "evict"),
			metric(m, `engrams_sessions{state="idle"}`), metric(m, `engrams_sessions{state="active"}`))
	}
	if got := metric(m, "engrams_snapshot_uploaded_bytes_total"); got <= uploaded {
		t.Fatalf("snapshot bytes uploaded %v after a suspend, %v before", got, uploaded)
	}
	reads = max(reads, cacheReads(m))
	if out := execOut(t, dev.c, s.ID, "wc -c < data.bin"); out != "300000" { // resumes it
		t.Fatalf("after resume the file has %q bytes", out)
	}
	m = scrape(t, dev.url)
	if count(m, "resume") != 1 || metric(m, `engrams_sessions{state="active"}`) != 1 || cacheReads(m) <= reads {
		t.Fatalf("after resume: resume ops %v, active %v, chunk cache reads %v (before %v)", count(m, "resume"),
			metric(m, `engrams_sessions{state="active"}`), cacheReads(m), reads)
	}
}

// TestDevInterruptSuspendsSessions: Ctrl-C on `engrams dev` (QEMU) suspends
// its session, showing it, and exits cleanly with no VMM left running; the
// next start finds the session Idle, and it resumes with its files.
func TestDevInterruptSuspendsSessions(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	ctx := context.Background()
	data := filepath.Join(shortTempDir(t), "d")
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(data) { // never leak a VM, even when the test fails
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	dev := startDev(t, data, "qemu")
	s, err := dev.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v (dev log: %s)", s, err, dev.stderr)
	}
	execOut(t, dev.c, s.ID, "echo kept > /root/note && sync")
	if len(vmmPIDs(data)) != 1 {
		t.Fatalf("VMMs of %s before Ctrl-C: %v, want one", data, vmmPIDs(data))
	}
	log, err := dev.stop(t, syscall.SIGINT)
	if err != nil || !strings.Contains(log, "suspending 1 session…") || !strings.Contains(log, "1/1 "+s.ID+" idle (snapshot ") {
		t.Fatalf("dev after Ctrl-C: %v; stderr:\n%s", err, log)
	}
	if pids := vmmPIDs(data); len(pids) != 0 {
		t.Fatalf("VMMs still running after dev stopped: %v", pids)
	}
	dev = startDev(t, data, "qemu")
	if got, err := dev.c.Sessions().Get(ctx, s.ID); err != nil || got.State != "idle" {
		t.Fatalf("after restart: %+v %v, want idle", got.State, err)
	}
	if out := execOut(t, dev.c, s.ID, "cat /root/note"); out != "kept" {
		t.Fatalf("resumed session's file = %q", out)
	}
	if log, err := dev.stop(t, syscall.SIGTERM); err != nil || !strings.Contains(log, "1/1 "+s.ID+" idle") {
		t.Fatalf("dev after SIGTERM: %v; stderr:\n%s", err, log)
	}
}

// TestDevSecondInterruptStopsAtOnce: a second Ctrl-C while a session is
// being suspended (its guest frozen, so the suspend cannot finish) stops
// dev at once, names the session it left, and leaves its machine running.
func TestDevSecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := filepath.Join(shortTempDir(t), "d")
	dev := startDev(t, data, "process")
	s, err := dev.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	guests := guestPIDs(filepath.Join(data, "host"))
	if len(guests) == 0 {
		t.Fatal("no guest daemon running")
	}
	for _, pid := range guests {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil { // the quiesce before the snapshot hangs
			t.Fatal(err)
		}
	}
	if err := dev.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "dev starts suspending", func() (bool, string) {
		return strings.Contains(dev.log(), "suspending 1 session…"), dev.log()
	})
	log, err := dev.stop(t, syscall.SIGINT)
	if err == nil || !strings.Contains(log, "stopped at once; left:") || !strings.Contains(log, "  "+s.ID+" ") ||
		!strings.Contains(log, "not suspended: "+s.ID) {
		t.Fatalf("dev after a second Ctrl-C: %v; stderr:\n%s", err, log)
	}
	for _, pid := range guests {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("guest %d of the session left running is gone: %v", pid, err)
		}
	}
}

// guestPIDs lists the guest daemons (process backend) running under dir.
func guestPIDs(dir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "engrams-guest") && strings.Contains(string(cmd), dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}
