package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// dialStub is a machine whose guest is whatever dial returns; it counts
// dials.
type dialStub struct {
	stubMachine
	mu    sync.Mutex
	dial  func(ctx context.Context) (net.Conn, error)
	dials int
}

func (s *dialStub) Dial(ctx context.Context) (net.Conn, error) {
	s.mu.Lock()
	s.dials++
	dial := s.dial
	s.mu.Unlock()
	return dial(ctx)
}

func (s *dialStub) dialCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}

// stubMachine is a machine without a guest that ends when done closes.
type stubMachine struct{ done chan struct{} }

func (s *stubMachine) Info() vmm.Info { return vmm.Info{PID: 7} }
func (s *stubMachine) Dial(context.Context) (net.Conn, error) {
	return nil, errors.New("no guest")
}
func (s *stubMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}
func (s *stubMachine) Pause(context.Context) error   { return nil }
func (s *stubMachine) Resume(context.Context) error  { return nil }
func (s *stubMachine) Destroy(context.Context) error { return nil }
func (s *stubMachine) Done() <-chan struct{}         { return s.done }

// fixedLink is a coordinator link that is always c (nil: none).
type fixedLink struct{ c *http.Client }

func (l fixedLink) Client() *http.Client { return l.c }
func (l fixedLink) Post(context.Context, *http.Client, string, any, any) error {
	return errors.New("posts are not expected")
}

func newTunnelRelay(link *http.Client) *Relay {
	return New(Deps{Link: fixedLink{link}})
}

// answerOnce plays a guest daemon answering one tunnel request with raw.
func answerOnce(raw string) func(context.Context) (net.Conn, error) {
	return func(context.Context) (net.Conn, error) {
		host, g := net.Pipe()
		go func() {
			defer g.Close()
			if _, err := http.ReadRequest(bufio.NewReader(g)); err != nil {
				return
			}
			_, _ = io.WriteString(g, raw)
		}()
		return host, nil
	}
}

// TestTunnelPoolBacksOff: a pool whose tunnels fail (the machine paused, a
// guest without a gateway, a guest hanging up at once) retries with a
// growing wait, never spinning, and ends when the machine does.
func TestTunnelPoolBacksOff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dial func(context.Context) (net.Conn, error)
	}{
		{"machine paused", func(context.Context) (net.Conn, error) {
			return nil, errors.New("dial guest: " + vmm.ErrPaused.Error())
		}},
		{"guest without a gateway", answerOnce("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}")},
		{"guest hangs up after the upgrade", answerOnce("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + guestapi.TunnelUpgrade + "\r\n\r\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				rl := newTunnelRelay(nil)
				m := &dialStub{stubMachine: stubMachine{done: make(chan struct{})}, dial: tt.dial}
				mc := machines.NewMachine("s1", 0, hostlink.MachineSpec{HarnessID: "h1"}, m, nil)
				_ = rl.whileMachine(mc, func(ctx context.Context) { rl.runTunnels(ctx, mc) })
				time.Sleep(time.Minute)
				n := m.dialCount()
				close(m.done) // the machine exits: the pool ends
				rl.wg.Wait()
				close(rl.stop)
				// Retrying every 5-10 s at worst after the first failures;
				// a pool without a wait would never let the clock move.
				if n < 4 || n > 40 {
					t.Errorf("%d tunnels tried in a minute, want a few (backing off)", n)
				}
			})
		})
	}
}

// TestTunnelToRealGuest runs the pool against the real guest daemon's
// gateway: a process's streamed request reaches the coordinator link with
// the session in its path, and the answer streams back.
func TestTunnelToRealGuest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := guest.New(guest.Config{WorkDir: dir, StateDir: filepath.Join(dir, "state"), HarnessDir: filepath.Join(dir, "no-harness"),
		GatewayAddr: "127.0.0.1:0", Env: []string{"PATH=" + os.Getenv("PATH")}}, guest.Deps{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var daemon sync.WaitGroup
	daemon.Go(func() { _ = srv.Serve(ctx, ln) })
	daemon.Go(func() { _ = srv.Run(ctx) })
	t.Cleanup(func() { cancel(); daemon.Wait() })
	gw := gatewayURL(t, ln.Addr().String())

	release := make(chan struct{})
	calls := make(chan string, 10)
	coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- r.Method + " " + r.URL.RequestURI() + " key=" + r.Header.Get("X-Api-Key")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: one\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "event: two\ndata: {}\n\n")
	}))
	t.Cleanup(coord.Close)
	linkTr := &http.Transport{}
	t.Cleanup(linkTr.CloseIdleConnections)
	rl := newTunnelRelay(&http.Client{Transport: toServer(coord.URL, linkTr)})
	m := &dialStub{stubMachine: stubMachine{done: make(chan struct{})}, dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}}
	mc := machines.NewMachine("s1", 0, hostlink.MachineSpec{HarnessID: "h1"}, m, nil)
	stopTunnels := rl.whileMachine(mc, func(ctx context.Context) { rl.runTunnels(ctx, mc) })
	t.Cleanup(func() {
		stopTunnels()
		close(m.done)
		rl.wg.Wait()
		close(rl.stop)
	})

	procTr := &http.Transport{}
	t.Cleanup(procTr.CloseIdleConnections)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw+"/anthropic_api_key/v1/messages?beta=true", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-Api-Key", "engrams-ph-abc")
	resp, err := (&http.Client{Transport: procTr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := <-calls; got != "POST /v1/gateway/s1/anthropic_api_key/v1/messages?beta=true key=engrams-ph-abc" {
		t.Fatalf("the coordinator got %q", got)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: one\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release) // the first event came while the coordinator still answered
	if rest, err := io.ReadAll(br); err != nil || !strings.Contains(string(rest), "event: two") {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// gatewayURL waits for the guest daemon's gateway listener.
func gatewayURL(t *testing.T, daemon string) string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + daemon + guestapi.PathHarness)
		if err == nil {
			var st guestapi.HarnessStatus
			_ = json.NewDecoder(resp.Body).Decode(&st)
			_ = resp.Body.Close()
			if st.Gateway != "" {
				return st.Gateway
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the guest daemon's gateway never listened")
	return ""
}

// toServer sends every request to base, as the link's client sends every
// request to the coordinator.
func toServer(base string, tr http.RoundTripper) http.RoundTripper {
	u, _ := url.Parse(base)
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, ""
		return tr.RoundTrip(out)
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
