package hostlink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// coordinator is one replica in a test: a hostlink.Server and a Router
// behind an httptest server on 127.0.0.1.
type coordinator struct {
	srv        *hostlink.Server
	router     *hostlink.Router
	http       *httptest.Server
	connects   chan domain.HostID
	disconnect chan domain.HostID
}

type replicaTable struct {
	mu    sync.Mutex
	hosts map[domain.HostID][2]string // host id -> replica id, addr
}

func (rt *replicaTable) set(hostID domain.HostID, replicaID, addr string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.hosts[hostID] = [2]string{replicaID, addr}
}

func (rt *replicaTable) lookup(_ context.Context, hostID domain.HostID) (string, string, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.hosts[hostID]
	if !ok {
		return "", "", nil
	}
	return r[0], r[1], nil
}

var tokens = map[string]domain.HostID{"tok-1": "host-1", "tok-2": "host-2"}

func authenticate(_ context.Context, token string) (hostlink.Credential, error) {
	if id, ok := tokens[token]; ok {
		return hostlink.Credential{HostID: id, TokenID: "tid-" + token}, nil
	}
	return hostlink.Credential{}, errors.New("unknown token")
}

// coordinatorHandler answers host requests with the sender's id.
func coordinatorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+hostlink.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		id, ok := hostlink.HostIDFrom(r.Context())
		if !ok {
			hostlink.WriteError(w, http.StatusInternalServerError, "", "no host id")
			return
		}
		_ = json.NewEncoder(w).Encode(hostlink.RegisterResponse{HostID: string(id)})
	})
	return mux
}

func newCoordinator(t *testing.T, replicaID, secret string, table *replicaTable) *coordinator {
	t.Helper()
	return newCoordinatorWith(t, replicaID, secret, table, nil)
}

// newCoordinatorWith is newCoordinator with the Server's config and deps
// adjusted by tune (nil: as they are).
func newCoordinatorWith(t *testing.T, replicaID, secret string, table *replicaTable, tune func(*hostlink.ServerConfig, *hostlink.ServerDeps)) *coordinator {
	t.Helper()
	c := &coordinator{connects: make(chan domain.HostID, 16), disconnect: make(chan domain.HostID, 16)}
	cfg, deps := hostlink.ServerConfig{}, hostlink.ServerDeps{
		Authenticate: authenticate,
		Handler:      coordinatorHandler(),
		OnConnect: func(id domain.HostID) {
			if table != nil {
				table.set(id, replicaID, c.http.URL)
			}
			c.connects <- id
		},
		OnDisconnect: func(id domain.HostID) { c.disconnect <- id },
	}
	if tune != nil {
		tune(&cfg, &deps)
	}
	c.srv = hostlink.NewServer(cfg, deps)
	lookup := func(context.Context, domain.HostID) (string, string, error) { return "", "", nil }
	if table != nil {
		lookup = table.lookup
	}
	c.router = hostlink.NewRouter(hostlink.RouterConfig{ReplicaID: replicaID, ClusterSecret: secret},
		hostlink.RouterDeps{Local: c.srv, Lookup: lookup})
	mux := http.NewServeMux()
	mux.Handle(hostlink.PathConnect, c.srv)
	mux.Handle(hostlink.PathPeerPrefix, c.router.PeerHandler())
	// /to/{host}/... proxies to the host through the Router, as the
	// coordinator's public API does.
	mux.HandleFunc("/to/{host}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		rt, err := c.router.Transport(r.Context(), domain.HostID(r.PathValue("host")))
		if err != nil {
			hostlink.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
			return
		}
		rest := "/" + r.PathValue("rest")
		(&httputil.ReverseProxy{
			Rewrite:       func(pr *httputil.ProxyRequest) { pr.Out.URL.Path = rest; pr.Out.URL.RawPath = "" },
			Transport:     rt,
			FlushInterval: -1,
		}).ServeHTTP(w, r)
	})
	c.http = httptest.NewServer(mux)
	t.Cleanup(func() {
		_ = c.srv.Close()
		c.http.Close()
		_ = c.router.Close()
	})
	return c
}

// hostHandler is what a test host serves to the coordinator.
func hostHandler(release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/machines", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode([]hostlink.MachineStatus{{SessionID: "s1", Epoch: 3, State: "running"}})
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, "second")
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		// Echo each line as it arrives: request and response both stream.
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintln(w, "echo:"+sc.Text())
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(2 << 20)
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("ws:"), b...)); err != nil {
				return
			}
		}
	})
	return mux
}

func dialHost(t *testing.T, url, token string, h http.Handler) *hostlink.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := hostlink.Dial(ctx, hostlink.DialConfig{URL: url, Token: token, Handler: h})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func waitFor(t *testing.T, ch <-chan domain.HostID, want domain.HostID) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got event for %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for event %q", want)
	}
}

func TestCoordinatorRefusesOtherVersions(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	v := hostlink.Version
	tests := []struct {
		header string
		want   []string
	}{
		{"", []string{"missing or invalid", fmt.Sprintf("this coordinator speaks %d", v), "upgrade the host agent"}},
		{strconv.Itoa(v - 1), []string{fmt.Sprintf("host speaks hostlink protocol %d, this coordinator speaks %d", v-1, v), "upgrade the host agent"}},
		{strconv.Itoa(v + 1), []string{fmt.Sprintf("host speaks hostlink protocol %d, this coordinator speaks %d", v+1, v), "upgrade the coordinator"}},
	}
	for _, tt := range tests {
		t.Run("v"+tt.header, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, c.http.URL+hostlink.PathConnect, nil)
			if tt.header != "" {
				req.Header.Set(hostlink.HeaderVersion, tt.header)
			}
			req.Header.Set("Authorization", "Bearer tok-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body hostlink.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest || body.Code != "version_mismatch" {
				t.Fatalf("got %d %+v, want 400 version_mismatch", resp.StatusCode, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body.Error, w) {
					t.Errorf("error %q lacks %q", body.Error, w)
				}
			}
		})
	}
}

// fakeCoordinator speaks protocol v: it refuses with 400 like a real
// coordinator, or (upgrade) accepts and answers with its version.
func fakeCoordinator(t *testing.T, v int, upgrade bool) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hostlink.HeaderVersion, strconv.Itoa(v))
		if !upgrade {
			hostlink.WriteError(w, http.StatusBadRequest, "version_mismatch",
				fmt.Sprintf("host speaks hostlink protocol %s, this coordinator speaks %d: upgrade the host agent", r.Header.Get(hostlink.HeaderVersion), v))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_, _, _ = c.Read(r.Context()) // until the host closes
		_ = c.CloseNow()
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func TestHostRefusesOtherVersions(t *testing.T) {
	t.Parallel()
	v := hostlink.Version
	tests := []struct {
		name    string
		url     string
		want    []string
		upgrade bool
	}{
		{"newer coordinator accepts", fakeCoordinator(t, v+1, true), []string{fmt.Sprintf("coordinator speaks hostlink protocol %d, this host speaks %d", v+1, v), "upgrade the host agent"}, true},
		{"older coordinator accepts", fakeCoordinator(t, v-1, true), []string{fmt.Sprintf("coordinator speaks hostlink protocol %d, this host speaks %d", v-1, v), "upgrade the coordinator"}, true},
		{"newer coordinator refuses", fakeCoordinator(t, v+1, false), []string{fmt.Sprintf("host speaks hostlink protocol %d, this coordinator speaks %d", v, v+1), "upgrade the host agent"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: tt.url, Token: "tok-1"})
			if !errors.Is(err, hostlink.ErrVersionMismatch) {
				t.Fatalf("dial: got %v, want ErrVersionMismatch", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestBadTokenRefused(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	_, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: c.http.URL, Token: "wrong"})
	if !errors.Is(err, hostlink.ErrUnauthorized) {
		t.Fatalf("dial: got %v, want ErrUnauthorized", err)
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic dG9rLTE="} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, c.http.URL+hostlink.PathConnect, nil)
		req.Header.Set(hostlink.HeaderVersion, strconv.Itoa(hostlink.Version))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body hostlink.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body.Error == "" {
			t.Errorf("auth %q: got %d %+v, want 401 with JSON error", auth, resp.StatusCode, body)
		}
	}
	if got := c.srv.Connected(); len(got) != 0 {
		t.Errorf("connected = %v after refusals", got)
	}
}

func TestRequestsBothWays(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	release := make(chan struct{})
	conn := dialHost(t, c.http.URL, "tok-1", hostHandler(release))
	waitFor(t, c.connects, "host-1")
	if conn.HostID() != "host-1" {
		t.Errorf("HostID = %q", conn.HostID())
	}

	// Host -> coordinator, with the host id known to the handler.
	resp, err := conn.HTTPClient().Post("http://coordinator"+hostlink.PathRegister, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var reg hostlink.RegisterResponse
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || reg.HostID != "host-1" {
		t.Fatalf("register: %d %+v", resp.StatusCode, reg)
	}

	// Coordinator -> host.
	rt, ok := c.srv.Transport("host-1")
	if !ok {
		t.Fatal("no transport for host-1")
	}
	client := &http.Client{Transport: rt}
	resp, err = client.Get("http://ignored/v1/machines")
	if err != nil {
		t.Fatal(err)
	}
	var ms []hostlink.MachineStatus
	_ = json.NewDecoder(resp.Body).Decode(&ms)
	resp.Body.Close()
	if len(ms) != 1 || ms[0].SessionID != "s1" {
		t.Fatalf("machines = %+v", ms)
	}

	// Streaming response: the first line arrives before the handler ends.
	resp, err = client.Get("http://ignored/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}

	if got := c.srv.Connected(); len(got) != 1 || got[0] != "host-1" {
		t.Errorf("connected = %v", got)
	}
	if _, ok := c.srv.Transport("host-2"); ok {
		t.Error("transport for a host that is not connected")
	}
}

func TestUpgradeThroughLink(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")

	// A WebSocket from a client of the coordinator, proxied over the link.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, c.http.URL+"/to/host-1/ws", nil)
	if err != nil {
		t.Fatalf("websocket dial: %v", err)
	}
	defer ws.CloseNow()
	for i := range 3 {
		msg := fmt.Sprintf("hello %d", i)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, b, err := ws.Read(ctx)
		if err != nil || string(b) != "ws:"+msg {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	// A big message crosses many yamux frames.
	big := strings.Repeat("x", 1<<20)
	if err := ws.Write(ctx, websocket.MessageBinary, []byte(big)); err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(2 << 20)
	if _, b, err := ws.Read(ctx); err != nil || len(b) != len(big)+3 {
		t.Fatalf("big read %d bytes, %v", len(b), err)
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
}

func TestServerCloseEndsLinks(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	conn := dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")
	rt, _ := c.srv.Transport("host-1")
	if err := c.srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("host link still up after Server.Close")
	}
	if _, err := (&http.Client{Transport: rt}).Get("http://h/v1/machines"); !errors.Is(err, hostlink.ErrHostNotConnected) {
		t.Errorf("request after close: got %v, want ErrHostNotConnected", err)
	}
	if _, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: c.http.URL, Token: "tok-1"}); err == nil {
		t.Error("dial succeeded after Server.Close")
	}
}
