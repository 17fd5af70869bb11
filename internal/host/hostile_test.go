package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/engrams/engrams/internal/hostlink"
)

// hostileRSSBound is the stated bound of the host agent's resident memory
// while its guests attack (VmHWM, the peak): a Go process of about 20 MiB
// plus, per attacked machine, one event line (1 MiB), one post (4 MiB,
// encoded once more to send) and 32 tunnels' buffers. The old relay took
// 384 MiB for a 128 MiB line; a 1 GiB event took it past 1 GiB.
const hostileRSSBound = 128 << 20

// killRSS ends the child at once, so an unbounded relay fails the test
// without taking the machine's memory.
const killRSS = 1 << 30

// hostileCoord is a coordinator that takes harness events (as the store
// does, above a cursor it lowers on a rewind) and guest bound reports.
type hostileCoord struct {
	srv *hostlink.Server

	mu      sync.Mutex
	cursor  map[string]int64
	taken   map[string][]int64
	reports map[string][]hostlink.GuestBoundReport
}

func newHostileCoord(t *testing.T) (*hostileCoord, string) {
	t.Helper()
	c := &hostileCoord{cursor: map[string]int64{}, taken: map[string][]int64{}, reports: map[string][]hostlink.GuestBoundReport{}}
	h := http.NewServeMux()
	h.HandleFunc("POST "+hostlink.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(hostlink.RegisterResponse{HostID: "host-1", HeartbeatInterval: time.Hour, Lease: time.Hour})
	})
	h.HandleFunc("POST "+hostlink.PathHeartbeat, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(hostlink.HeartbeatResponse{Lease: time.Hour})
	})
	h.HandleFunc("POST "+hostlink.PathHarnessEvents, c.harnessEvents)
	h.HandleFunc("POST "+hostlink.PathGuestBound, func(w http.ResponseWriter, r *http.Request) {
		var rep hostlink.GuestBoundReport
		if err := json.NewDecoder(io.LimitReader(r.Body, 16<<10)).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.reports[r.PathValue("id")] = append(c.reports[r.PathValue("id")], rep)
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	c.srv = hostlink.NewServer(hostlink.ServerConfig{}, hostlink.ServerDeps{
		Authenticate: func(context.Context, string) (hostlink.Credential, error) {
			return hostlink.Credential{HostID: "host-1"}, nil
		},
		Handler: h,
	})
	mux := http.NewServeMux()
	mux.Handle(hostlink.PathConnect, c.srv)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { _ = c.srv.Close(); ts.Close() })
	return c, ts.URL
}

func (c *hostileCoord) harnessEvents(w http.ResponseWriter, r *http.Request) {
	var req hostlink.HarnessEventsRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 32<<20)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sid := r.PathValue("id")
	c.mu.Lock()
	if req.RewoundTo != nil {
		c.cursor[sid] = min(c.cursor[sid], *req.RewoundTo)
	}
	for _, e := range req.Events {
		if e.Seq > c.cursor[sid] {
			c.taken[sid] = append(c.taken[sid], e.Seq)
			c.cursor[sid] = e.Seq
		}
	}
	cursor := c.cursor[sid]
	c.mu.Unlock()
	_ = json.NewEncoder(w).Encode(hostlink.HarnessEventsResponse{Cursor: cursor})
}

func (c *hostileCoord) state(sid string) (taken []int64, bounds []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reports[sid] {
		bounds = append(bounds, r.Bound)
	}
	return slices.Clone(c.taken[sid]), bounds
}

// hostCall sends one request to the host's machine API over the link.
func (c *hostileCoord) hostCall(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	rt, ok := c.srv.Transport("host-1")
	if !ok {
		return nil, errors.New("host not connected")
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://host"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(hostlink.HeaderEpoch, "1")
	return (&http.Client{Transport: rt}).Do(req)
}

func (c *hostileCoord) start(t *testing.T, sid string, harness bool) {
	t.Helper()
	spec := hostlink.MachineSpec{MemoryMiB: 128, VCPUs: 1}
	if harness {
		spec.Harness, spec.HarnessID = "shell", "h1"
	}
	b, _ := json.Marshal(hostlink.StartRequest{Epoch: 1, Spec: spec})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.hostCall(ctx, http.MethodPut, "/v1/machines/"+sid, b)
	if err != nil {
		t.Fatalf("start %s: %v", sid, err)
	}
	defer resp.Body.Close()
	if msg, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("start %s: %s %s", sid, resp.Status, msg)
	}
}

func (c *hostileCoord) destroy(t *testing.T, sid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.hostCall(ctx, http.MethodDelete, "/v1/machines/"+sid, nil)
	if err != nil {
		t.Fatalf("destroy %s: %v", sid, err)
	}
	_ = resp.Body.Close()
}

// exec runs a command in sid through the host and reports how long it took.
func (c *hostileCoord) exec(ctx context.Context, sid string) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.hostCall(ctx, http.MethodPost, "/v1/machines/"+sid+"/guest/v1/exec/run", []byte(`{"argv":["true"]}`))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"type":"exit"`) {
		return 0, fmt.Errorf("exec in %s: %s %q %v", sid, resp.Status, out, err)
	}
	return time.Since(t0), nil
}

// child is the host agent process and the sampler of its memory.
type child struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	peak   int64 // VmRSS peak since the last phase began
	killed bool
	done   chan struct{}
}

func startChild(t *testing.T, coordURL, sockDir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostileChildEnv+"=1", hostileCoordEnv+"="+coordURL,
		hostileDataEnv+"="+t.TempDir(), hostileSockEnv+"="+sockDir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go ch.sample()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-ch.done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("host agent log:\n%s", tail(logs.String(), 4000))
		}
	})
	return ch
}

func tail(s string, n int) string { return s[max(len(s)-n, 0):] }

// procStatus reads a field of /proc/<pid>/status in bytes (0: gone).
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sample tracks the child's VmRSS every 10 ms and kills it past killRSS.
func (ch *child) sample() {
	defer close(ch.done)
	for {
		rss := procStatus(ch.cmd.Process.Pid, "VmRSS")
		if rss == 0 {
			return
		}
		ch.mu.Lock()
		ch.peak = max(ch.peak, rss)
		if rss > killRSS && !ch.killed {
			ch.killed = true
			_ = ch.cmd.Process.Kill()
		}
		ch.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// phasePeak returns the VmRSS peak since the last call and starts anew.
func (ch *child) phasePeak() (peak int64, killed bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	peak, ch.peak = ch.peak, 0
	return peak, ch.killed
}

func (ch *child) wasKilled() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.killed
}
