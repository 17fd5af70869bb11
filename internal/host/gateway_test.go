package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// tunnelGuest is a guest daemon with the guest API v4 tunnel semantics:
// GET PathTunnel waits until a "process" connects (connect), then answers
// 101 and carries that connection's bytes.
type tunnelGuest struct {
	mu      sync.Mutex
	waiting []chan net.Conn
	total   int // tunnel requests ever received
	changed chan struct{}
}

func newTunnelGuest() *tunnelGuest { return &tunnelGuest{changed: make(chan struct{})} }

func (g *tunnelGuest) notify() { // callers hold g.mu
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *tunnelGuest) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(guestapi.Ready{Version: guestapi.Version})
	})
	mux.HandleFunc("GET "+guestapi.PathHarness, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(guestapi.HarnessStatus{State: guestapi.HarnessReady, Gateway: "http://127.0.0.1:4780"})
	})
	mux.HandleFunc("GET "+guestapi.PathTunnel, g.tunnel)
	return mux
}

func (g *tunnelGuest) tunnel(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), guestapi.TunnelUpgrade) || !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
		http.Error(w, "want an upgrade", http.StatusBadRequest)
		return
	}
	ch := make(chan net.Conn, 1)
	g.mu.Lock()
	g.total++
	g.waiting = append(g.waiting, ch)
	g.notify()
	g.mu.Unlock()
	var c net.Conn
	select {
	case c = <-ch:
	case <-r.Context().Done():
		g.mu.Lock()
		for i, x := range g.waiting {
			if x == ch {
				g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			}
		}
		g.notify()
		g.mu.Unlock()
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = c.Close()
		return
	}
	defer conn.Close()
	defer c.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + guestapi.TunnelUpgrade + "\r\n\r\n")
	_ = brw.Flush()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(c, brw); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, c); done <- struct{}{} }()
	<-done
}

// connect is a guest process connecting to the gateway listener: it takes
// the oldest waiting tunnel.
func (g *tunnelGuest) connect(t *testing.T) net.Conn {
	t.Helper()
	g.waitFor(t, func() bool { return len(g.waiting) > 0 })
	g.mu.Lock()
	ch := g.waiting[0]
	g.waiting = g.waiting[1:]
	g.notify()
	g.mu.Unlock()
	proc, guestEnd := net.Pipe()
	ch <- guestEnd
	t.Cleanup(func() { _ = proc.Close() })
	return proc
}

func (g *tunnelGuest) waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	timeout := time.After(wait)
	for {
		g.mu.Lock()
		ok, ch := cond(), g.changed
		g.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			g.mu.Lock()
			defer g.mu.Unlock()
			t.Fatalf("guest: condition not met (%d tunnels waiting, %d requested)", len(g.waiting), g.total)
		}
	}
}

// tunnelBackend boots machines whose guest is a tunnelGuest, one per
// session.
type tunnelBackend struct {
	mu     sync.Mutex
	guests map[string]*tunnelGuest
	ms     []*tunnelMachine
}

func (b *tunnelBackend) guest(sid string) *tunnelGuest {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.guests[sid] == nil {
		b.guests[sid] = newTunnelGuest()
	}
	return b.guests[sid]
}

func (b *tunnelBackend) Capabilities() vmm.Capabilities {
	return vmm.Capabilities{Name: "fake", Version: "1", Acceleration: "none", Harness: true}
}

func (b *tunnelBackend) Boot(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	m := &tunnelMachine{info: vmm.Info{SessionID: spec.SessionID, Dir: spec.Dir}, l: newPipeListener(), done: make(chan struct{})}
	m.srv = &http.Server{Handler: b.guest(spec.SessionID).handler()}
	m.served = make(chan struct{})
	go func() { defer close(m.served); _ = m.srv.Serve(m.l) }()
	b.mu.Lock()
	b.ms = append(b.ms, m)
	b.mu.Unlock()
	return m, nil
}

func (b *tunnelBackend) Restore(context.Context, vmm.Spec, vmm.Snapshot) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}

func (b *tunnelBackend) Recover(context.Context, string) (vmm.Machine, error) {
	return nil, vmm.ErrGone
}

func (b *tunnelBackend) destroyAll() {
	b.mu.Lock()
	ms := b.ms
	b.mu.Unlock()
	for _, m := range ms {
		_ = m.Destroy(context.Background())
	}
}

type tunnelMachine struct {
	info   vmm.Info
	l      *pipeListener
	srv    *http.Server
	served chan struct{}
	once   sync.Once
	done   chan struct{}
}

func (m *tunnelMachine) Info() vmm.Info                             { return m.info }
func (m *tunnelMachine) Dial(ctx context.Context) (net.Conn, error) { return m.l.dial(ctx) }
func (m *tunnelMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}
func (m *tunnelMachine) Pause(context.Context) error  { return nil }
func (m *tunnelMachine) Resume(context.Context) error { return nil }
func (m *tunnelMachine) Done() <-chan struct{}        { return m.done }

func (m *tunnelMachine) Destroy(context.Context) error {
	m.once.Do(func() {
		close(m.done)
		_ = m.l.Close()
		_ = m.srv.Close()
		<-m.served
	})
	return nil
}

// gatewayCall is one request the test coordinator's gateway received.
type gatewayCall struct {
	HostID, Path, Query string
	Header              http.Header
	Body                string
}

// gatewayCoord is a coordinator that owns every session it is told to and
// serves hostlink.PathGateway: it records each call and answers with two
// server-sent events, the second once release is closed.
type gatewayCoord struct {
	srv     *hostlink.Server
	calls   chan gatewayCall
	release chan struct{}
	owned   []hostlink.Ownership
}

func newGatewayCoord(t *testing.T, owned ...hostlink.Ownership) (*gatewayCoord, string) {
	t.Helper()
	c := &gatewayCoord{calls: make(chan gatewayCall, 100), release: make(chan struct{}), owned: owned}
	h := http.NewServeMux()
	h.HandleFunc("POST "+hostlink.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		id, _ := hostlink.HostIDFrom(r.Context())
		_ = json.NewEncoder(w).Encode(hostlink.RegisterResponse{HostID: string(id), Owned: c.owned, HeartbeatInterval: time.Hour})
	})
	h.HandleFunc(hostlink.PathGateway+"{rest...}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := hostlink.HostIDFrom(r.Context())
		b, _ := io.ReadAll(r.Body)
		c.calls <- gatewayCall{HostID: string(id), Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(b)}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: one\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-c.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "event: two\ndata: {}\n\n")
	})
	c.srv = hostlink.NewServer(hostlink.ServerConfig{}, hostlink.ServerDeps{
		Authenticate: func(_ context.Context, tok string) (hostlink.Credential, error) {
			if tok != "tok" {
				return hostlink.Credential{}, errors.New("unknown token")
			}
			return hostlink.Credential{HostID: "host-1"}, nil
		},
		Handler: h,
	})
	mux := http.NewServeMux()
	mux.Handle(hostlink.PathConnect, c.srv)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		_ = c.srv.Close()
		ts.Close()
	})
	return c, ts.URL
}

// start asks the host to run sid, waiting for the link to be up.
func (c *gatewayCoord) start(t *testing.T, sid string, spec hostlink.MachineSpec) {
	t.Helper()
	deadline := time.Now().Add(wait)
	var rt http.RoundTripper
	for ok := false; !ok; rt, ok = c.srv.Transport("host-1") {
		if time.Now().After(deadline) {
			t.Fatal("host never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := json.Marshal(hostlink.StartRequest{Epoch: 1, Spec: spec})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://host/v1/machines/"+sid, strings.NewReader(string(b)))
	req.Header.Set(hostlink.HeaderEpoch, "1")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("start %s: %d %s", sid, resp.StatusCode, body)
	}
}

func (c *gatewayCoord) destroy(t *testing.T, sid string) {
	t.Helper()
	rt, _ := c.srv.Transport("host-1")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, "http://host/v1/machines/"+sid, nil)
	req.Header.Set(hostlink.HeaderEpoch, "1")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("destroy %s: %d", sid, resp.StatusCode)
	}
}

// TestGatewayTunnels: a machine with a harness keeps two tunnels waiting
// on its guest; a guest process's requests through one reach the
// coordinator's gateway with the session in the path, stream back as they
// come, and reuse the connection; the pool refills, and ends with the
// machine. A machine without a harness gets no tunnels.
func TestGatewayTunnels(t *testing.T) {
	t.Parallel()
	c, url := newGatewayCoord(t, hostlink.Ownership{SessionID: "s0", Epoch: 1}, hostlink.Ownership{SessionID: "s1", Epoch: 1})
	b := &tunnelBackend{guests: map[string]*tunnelGuest{}}
	t.Cleanup(b.destroyAll)
	runAgentWith(t, url, t.TempDir(), nil, func(_ *host.Config, d *host.Deps) { d.Backend = b })
	c.start(t, "s0", hostlink.MachineSpec{MemoryMiB: 128})
	c.start(t, "s1", hostlink.MachineSpec{MemoryMiB: 128, Harness: "shell", HarnessID: "h1"})
	g := b.guest("s1")
	g.waitFor(t, func() bool { return len(g.waiting) == 2 })

	proc := g.connect(t)
	br := bufio.NewReader(proc)
	for i, path := range []string{"/anthropic_api_key/v1/messages?beta=true", "/anthropic_api_key/v1/messages"} {
		req := "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:4780\r\nX-Api-Key: engrams-ph-abc\r\nEngrams-Epoch: 9\r\n" +
			"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
		if _, err := io.WriteString(proc, req); err != nil {
			t.Fatal(err)
		}
		call := recv(t, c.calls, nil)
		wantQuery := map[int]string{0: "beta=true"}[i]
		if call.HostID != "host-1" || call.Path != "/v1/gateway/s1/anthropic_api_key/v1/messages" || call.Query != wantQuery || call.Body != "{}" {
			t.Fatalf("request %d reached the coordinator as %+v", i, call)
		}
		if call.Header.Get("X-Api-Key") != "engrams-ph-abc" || call.Header.Get("Engrams-Epoch") != "" {
			t.Fatalf("request %d headers %v: want the placeholder kept, engrams headers dropped", i, call.Header)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		rb := bufio.NewReader(resp.Body)
		if line, err := rb.ReadString('\n'); err != nil || line != "event: one\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		if i == 0 {
			close(c.release) // the first event came while the coordinator still answered
		}
		rest, err := io.ReadAll(rb)
		if err != nil || !strings.Contains(string(rest), "event: two") {
			t.Fatalf("rest %q, %v", rest, err)
		}
	}
	g.waitFor(t, func() bool { return len(g.waiting) == 2 }) // refilled while one connection is in use
	s0 := b.guest("s0")
	s0.mu.Lock()
	if s0.total != 0 {
		t.Errorf("a machine without a harness got %d tunnel requests", s0.total)
	}
	s0.mu.Unlock()

	c.destroy(t, "s1")
	g.waitFor(t, func() bool { return len(g.waiting) == 0 })
	_ = proc.SetReadDeadline(time.Now().Add(wait))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the connection of a destroyed machine: read %v, want it closed", err)
	}
}
