package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
)

// testDaemon is a guest daemon serving on 127.0.0.1, with the harness
// adapter running (or not).
type testDaemon struct {
	t    *testing.T
	srv  *Server
	addr string
	hc   *http.Client
	stop func()
}

func startDaemon(t *testing.T, cfg Config, run bool) *testDaemon {
	t.Helper()
	return startDaemonWith(t, cfg, run, nil)
}

// startDaemonWith lets tweak change the server before it starts.
func startDaemonWith(t *testing.T, cfg Config, run bool, tweak func(*Server)) *testDaemon {
	t.Helper()
	srv := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if tweak != nil {
		tweak(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if run {
		wg.Go(func() {
			if err := srv.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	tr := &http.Transport{}
	var once sync.Once
	d := &testDaemon{t: t, srv: srv, addr: ln.Addr().String(), hc: &http.Client{Transport: tr}}
	d.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			tr.CloseIdleConnections()
		})
	}
	t.Cleanup(d.stop)
	return d
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (d *testDaemon) url(path string) string { return "http://" + d.addr + path }

func (d *testDaemon) apply(entries ...guestapi.OutboxEntry) int64 {
	d.t.Helper()
	body, _ := json.Marshal(guestapi.OutboxApply{Entries: entries})
	resp, err := d.hc.Post(d.url(guestapi.PathOutbox), "application/json", bytes.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st guestapi.OutboxState
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		d.t.Fatalf("outbox apply: %s", resp.Status)
	}
	return st.Applied
}

func (d *testDaemon) status() guestapi.HarnessStatus {
	d.t.Helper()
	resp, err := d.hc.Get(d.url(guestapi.PathHarness))
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st guestapi.HarnessStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		d.t.Fatalf("harness status: %s", resp.Status)
	}
	return st
}

func promptEntry(seq int64, p guestapi.PromptPayload) guestapi.OutboxEntry {
	return guestapi.OutboxEntry{Seq: seq, ID: fmt.Sprintf("id-%d", seq), Kind: guestapi.OutboxPrompt, Payload: mustJSON(p)}
}

func interruptEntry(seq int64, turn string) guestapi.OutboxEntry {
	return guestapi.OutboxEntry{Seq: seq, ID: fmt.Sprintf("id-%d", seq), Kind: guestapi.OutboxInterrupt, Payload: mustJSON(guestapi.InterruptPayload{Turn: turn})}
}

// eventStream follows the daemon's harness events.
type eventStream struct {
	t      *testing.T
	head   int64
	ch     chan guestapi.HarnessEvent
	cancel func()
	done   chan struct{}
}

func (d *testDaemon) follow(after int64) *eventStream {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url(guestapi.PathHarnessEvents+"?after="+strconv.FormatInt(after, 10)), nil)
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	resp, err := d.hc.Do(req)
	if err != nil {
		cancel()
		d.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		d.t.Fatalf("follow events: %s", resp.Status)
	}
	head, err := strconv.ParseInt(resp.Header.Get(guestapi.HeaderHarnessHead), 10, 64)
	if err != nil {
		d.t.Fatalf("head header %q", resp.Header.Get(guestapi.HeaderHarnessHead))
	}
	es := &eventStream{t: d.t, head: head, ch: make(chan guestapi.HarnessEvent), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(es.done)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var e guestapi.HarnessEvent
			if dec.Decode(&e) != nil {
				return
			}
			select {
			case es.ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	d.t.Cleanup(es.close)
	return es
}

func (es *eventStream) close() {
	es.cancel()
	<-es.done
}

// until returns the events up to and including the first that match,
// failing the test after timeout.
func (es *eventStream) until(timeout time.Duration, what string, match func(guestapi.HarnessEvent) bool) []guestapi.HarnessEvent {
	es.t.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var out []guestapi.HarnessEvent
	for {
		select {
		case e := <-es.ch:
			out = append(out, e)
			if match(e) {
				return out
			}
		case <-t.C:
			es.t.Fatalf("no %s within %v; got %s", what, timeout, eventsText(out))
		}
	}
}

func (es *eventStream) untilIdle(turn string, timeout time.Duration) []guestapi.HarnessEvent {
	es.t.Helper()
	return es.until(timeout, "idle of "+turn, func(e guestapi.HarnessEvent) bool {
		return e.Type == guestapi.EventIdle && e.Turn == turn
	})
}

func eventsText(evs []guestapi.HarnessEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %d %s %s %.300s", e.Seq, e.Turn, e.Type, e.Data)
	}
	return b.String()
}

// ofTurn keeps the events of one turn.
func ofTurn(evs []guestapi.HarnessEvent, turn string) []guestapi.HarnessEvent {
	var out []guestapi.HarnessEvent
	for _, e := range evs {
		if e.Turn == turn {
			out = append(out, e)
		}
	}
	return out
}

func types(evs []guestapi.HarnessEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// eventData decodes the data of the first event of type typ.
func eventData[T any](t *testing.T, evs []guestapi.HarnessEvent, typ string) (T, bool) {
	t.Helper()
	var v T
	for _, e := range evs {
		if e.Type == typ {
			if err := json.Unmarshal(e.Data, &v); err != nil {
				t.Fatalf("%s data %s: %v", typ, e.Data, err)
			}
			return v, true
		}
	}
	return v, false
}

// stageHarness assembles a built-in harness into a new directory.
func stageHarness(t *testing.T, spec harness.BuiltinSpec, cacheDir string) string {
	t.Helper()
	b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: cacheDir}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := b.StageBuiltin(context.Background(), spec, dir); err != nil {
		t.Fatalf("stage %s: %v", spec.Name, err)
	}
	return dir
}

// fakeHost plays the host end of the model gateway: it keeps tunnels
// waiting at the daemon and forwards each tunnelled HTTP request for
// /<kind>/<rest> to upstream/<rest>, putting the real key in place of the
// placeholder the way the coordinator does.
type fakeHost struct {
	t            *testing.T
	apiAddr      string
	cfg          fakeHostConfig
	tr           *http.Transport
	mu           sync.Mutex
	paths        []string // "/<kind>/<rest>" of each request
	ctx          context.Context
	cancel       func()
	wg           sync.WaitGroup
	tunnelErrors int
}

type fakeHostConfig struct {
	upstream  string            // base URL requests are forwarded to
	keys      map[string]string // placeholder -> real key
	pool      int               // tunnels kept waiting
	retryAuth bool              // leave 401/403 answers alone (else add x-should-retry: false, as the coordinator does)
}

func startFakeHost(t *testing.T, apiAddr string, cfg fakeHostConfig) *fakeHost {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &fakeHost{t: t, apiAddr: apiAddr, cfg: cfg, tr: &http.Transport{DisableCompression: true}, ctx: ctx, cancel: cancel}
	for range max(cfg.pool, 1) {
		h.wg.Go(h.tunnelLoop)
	}
	t.Cleanup(h.stop)
	return h
}

func (h *fakeHost) stop() {
	h.cancel()
	h.wg.Wait()
	h.tr.CloseIdleConnections()
}

func (h *fakeHost) requested() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.paths...)
}

// tunnelLoop keeps one tunnel waiting; each paired one is served while
// the next waits.
func (h *fakeHost) tunnelLoop() {
	for h.ctx.Err() == nil {
		c, br, err := openTunnel(h.ctx, h.apiAddr)
		if err != nil {
			if h.ctx.Err() == nil {
				h.mu.Lock()
				h.tunnelErrors++
				h.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		h.wg.Go(func() { h.serveConn(c, br) })
	}
}

// openTunnel asks the daemon for a tunnel and waits for its 101.
func openTunnel(ctx context.Context, apiAddr string) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", apiAddr)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, func() { _ = c.Close() })
	_, err = io.WriteString(c, "GET "+guestapi.PathTunnel+" HTTP/1.1\r\nHost: guest\r\nConnection: Upgrade\r\nUpgrade: "+
		guestapi.TunnelUpgrade+"\r\n"+guestapi.HeaderVersion+": "+strconv.Itoa(guestapi.Version)+"\r\n\r\n")
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		_ = c.Close()
		return nil, nil, fmt.Errorf("tunnel: %s: %s", resp.Status, body)
	}
	return c, br, nil
}

func (h *fakeHost) serveConn(c net.Conn, br *bufio.Reader) {
	defer c.Close()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.paths = append(h.paths, req.URL.Path)
		h.mu.Unlock()
		rest := "/"
		if parts := strings.SplitN(strings.TrimPrefix(req.URL.Path, "/"), "/", 2); len(parts) == 2 {
			rest += parts[1]
		}
		u := h.cfg.upstream + rest
		if req.URL.RawQuery != "" {
			u += "?" + req.URL.RawQuery
		}
		out, _ := http.NewRequestWithContext(h.ctx, req.Method, u, req.Body)
		out.Header, out.ContentLength = req.Header.Clone(), req.ContentLength
		if k, ok := h.cfg.keys[out.Header.Get("x-api-key")]; ok {
			out.Header.Set("x-api-key", k)
		}
		if k, ok := h.cfg.keys[strings.TrimPrefix(out.Header.Get("Authorization"), "Bearer ")]; ok {
			out.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := h.tr.RoundTrip(out)
		if err != nil {
			_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		if !h.cfg.retryAuth && (resp.StatusCode == 401 || resp.StatusCode == 403) {
			resp.Header.Set("x-should-retry", "false")
		}
		err = resp.Write(c)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}
