package guest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/engrams/engrams/internal/guestapi"
)

// echoUpstream answers with what it received: method, path, query, key
// and body length; /stream sends three flushed chunks.
func echoUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			for i := range 3 {
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s?%s key=%s bytes=%d", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("x-api-key"), n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func gatewayConfig(t *testing.T) Config {
	return Config{WorkDir: t.TempDir(), StateDir: t.TempDir(), HarnessDir: t.TempDir(), GatewayAddr: "127.0.0.1:0"}
}

func TestGatewayTunnel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, gatewayConfig(t), true)
	gw := waitGateway(t, d)
	if st := d.status(); st.State != guestapi.HarnessNone {
		t.Errorf("no bundle, state %q", st.State)
	}
	up := echoUpstream(t)
	host := startFakeHost(t, d.addr, fakeHostConfig{upstream: up.URL, keys: map[string]string{"ph": "real"}, pool: 2})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

	tests := []struct {
		name, method, path string
		body               []byte
		want               string
	}{
		{"get", "GET", "/anthropic_api_key/v1/models?limit=1", nil, "GET /v1/models?limit=1 key=real bytes=0"},
		{"post 1 MiB", "POST", "/openai_api_key/responses", bytes.Repeat([]byte("x"), 1<<20), "POST /responses? key=real bytes=1048576"},
		{"streamed", "GET", "/anthropic_api_key/stream", nil, "chunk 0\nchunk 1\nchunk 2\n"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, gw+tt.path, bytes.NewReader(tt.body))
		req.Header.Set("x-api-key", "ph")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != tt.want {
			t.Errorf("%s: %s %q, want %q", tt.name, resp.Status, b, tt.want)
		}
	}
	// Many clients at once, each on its own tunnel.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			resp, err := hc.Get(fmt.Sprintf("%s/k/n%d", gw, i))
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("GET /n%d? key= bytes=0", i); string(b) != want {
				t.Errorf("client %d: %q", i, b)
			}
		})
	}
	wg.Wait()
	if n := len(host.requested()); n != len(tests)+20 {
		t.Errorf("the host saw %d requests", n)
	}
}

// waitGateway waits for the adapter's gateway listener and returns its URL.
func waitGateway(t *testing.T, d *testDaemon) string {
	t.Helper()
	var st guestapi.HarnessStatus
	waitFor(t, "the gateway listener", func() bool { st = d.status(); return st.Gateway != "" })
	return st.Gateway
}

// TestGatewayPairing: a client that comes before any tunnel waits for one;
// one that waits too long is closed; a bad tunnel request is refused; a
// tunnel request waiting when the daemon stops gets 503.
func TestGatewayPairing(t *testing.T) {
	t.Parallel()
	d := startDaemonWith(t, gatewayConfig(t), true, func(s *Server) { s.gw.wait = 300 * time.Millisecond })
	gw := strings.TrimPrefix(waitGateway(t, d), "http://")

	resp, err := d.hc.Get(d.url(guestapi.PathTunnel))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("tunnel without upgrade: %s", resp.Status)
	}

	// Nobody opens a tunnel: the connection is closed after the wait.
	c, err := net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("unpaired connection: read %d, %v", n, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 3*time.Second {
		t.Errorf("unpaired connection closed after %v", took)
	}
	c.Close()

	// The client first, then the tunnel: bytes flow both ways, and a
	// half-close reaches the other side.
	c, err = net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tc, br, err := openTunnel(ctx, d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("tunnel read %q, %v", got, err)
	}
	if _, err := io.WriteString(tc, "pong"); err != nil {
		t.Fatal(err)
	}
	if err := tc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	if err != nil || string(b) != "pong" {
		t.Fatalf("client read %q, %v", b, err)
	}
	if _, err := io.WriteString(c, "after"); err != nil { // the other way still flows
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(br); err != nil || string(b) != "after" {
		t.Fatalf("tunnel read after the half-close %q, %v", b, err)
	}

}

// TestGatewayStop: a tunnel request waiting when the daemon stops is
// answered 503.
func TestGatewayStop(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, gatewayConfig(t), true)
	waitGateway(t, d)
	wc, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if _, err := io.WriteString(wc, "GET "+guestapi.PathTunnel+" HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: "+guestapi.TunnelUpgrade+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tunnel request to wait", func() bool {
		d.srv.gw.mu.Lock()
		defer d.srv.gw.mu.Unlock()
		return len(d.srv.gw.tunnels) == 1
	})
	d.stop()
	_ = wc.SetReadDeadline(time.Now().Add(5 * time.Second))
	r, err := http.ReadResponse(bufio.NewReader(wc), nil)
	if err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("waiting tunnel at stop: %v %v", r, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGatewayRefusesOutsideAddresses(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:4780", "example.com:80", "no-port"} {
		if ln, err := listenLoopback(addr); err == nil {
			ln.Close()
			t.Errorf("listenLoopback(%q) succeeded", addr)
		}
	}
	d := startDaemon(t, Config{WorkDir: t.TempDir(), StateDir: t.TempDir(), HarnessDir: stageHarness(t, shellSpec, ""), GatewayAddr: "0.0.0.0:0"}, true)
	waitFor(t, "the gateway failure", func() bool { return d.status().State == guestapi.HarnessFailed })
	if st := d.status(); !strings.Contains(st.Error, "not a loopback address") {
		t.Errorf("status %+v", st)
	}
}

// TestHalfCloseYamux: a yamux stream (the host link's tunnels) half-closes
// with Close: the peer reads EOF and can still send.
func TestHalfCloseYamux(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	cs, err := yamux.Client(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ss, err := yamux.Server(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	local, err := cs.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Write([]byte("x")); err != nil { // the peer learns of the stream
		t.Fatal(err)
	}
	peer, err := ss.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	if !halfClose(local) {
		t.Fatal("halfClose(yamux stream) = false")
	}
	if got, err := io.ReadAll(peer); err != nil || string(got) != "x" {
		t.Fatalf("peer read %q, %v", got, err)
	}
	if _, err := peer.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	_ = peer.Close()
	if got, err := io.ReadAll(local); err != nil || string(got) != "back" {
		t.Fatalf("after the half-close the stream read %q, %v", got, err)
	}
}
