package hostlink_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
)

// gate blocks a connection's reads and writes while it is frozen.
type gate struct {
	mu     sync.Mutex
	frozen chan struct{} // nil: open
}

func (g *gate) freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen == nil {
		g.frozen = make(chan struct{})
	}
}

func (g *gate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen != nil {
		close(g.frozen)
		g.frozen = nil
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.frozen
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// gatedConn is a host's connection that stops passing bytes while its gate
// is frozen: to the coordinator its host has hung.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait() // what arrived while frozen is held until thawed
	return n, err
}

func (c gatedConn) Write(p []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(p)
}

// dialGated links a host whose connection g can freeze.
func dialGated(t *testing.T, url string, g *gate) *hostlink.Conn {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return gatedConn{Conn: c, g: g}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	conn, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: url, Token: "tok-1", Handler: hostHandler(nil),
		HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { g.thaw(); _ = conn.Close() })
	return conn
}

// TestSecondLinkRefusedWhileFirstLive: a second agent with the same token
// is refused with 409 already_connected naming the live link, and the
// first link is untouched: it still serves both ways and never reports the
// host gone.
func TestSecondLinkRefusedWhileFirstLive(t *testing.T) {
	t.Parallel()
	c := newCoordinator(t, "a", "secret", nil)
	first := dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")
	for range 3 { // a retrying agent is refused every time
		_, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: c.http.URL, Token: "tok-1"})
		if !errors.Is(err, hostlink.ErrAlreadyConnected) || errors.Is(err, hostlink.ErrUnauthorized) {
			t.Fatalf("second dial: %v, want ErrAlreadyConnected", err)
		}
		for _, w := range []string{"host host-1 is already connected from 127.0.0.1:", "stop the other agent"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q lacks %q", err, w)
			}
		}
	}
	select {
	case <-first.Done():
		t.Fatal("the first link ended when a second agent tried to connect")
	case id := <-c.disconnect:
		t.Fatalf("OnDisconnect(%s) while the first link is live", id)
	default:
	}
	resp, err := first.HTTPClient().Post("http://c"+hostlink.PathRegister, "application/json", nil)
	if err != nil {
		t.Fatalf("first link after the refusals: %v", err)
	}
	resp.Body.Close()
	rt, ok := c.srv.Transport("host-1")
	if !ok {
		t.Fatal("no transport to host-1")
	}
	if resp, err := (&http.Client{Transport: rt}).Get("http://h/v1/machines"); err != nil {
		t.Fatalf("coordinator to the first link: %v", err)
	} else {
		resp.Body.Close()
	}
}

// TestSlowLinkHoldsItsHost: a link whose host is slow to answer a ping
// (busy, or its frames queued behind others) still holds its host, so a
// second connection is refused instead of ending a live link; once the
// link stays silent past yamux's keepalive it ends, and the next dial is
// admitted. A link that ended cleanly is no obstacle either.
func TestSlowLinkHoldsItsHost(t *testing.T) {
	t.Parallel()
	c := newCoordinatorWith(t, "a", "secret", nil, func(cfg *hostlink.ServerConfig, _ *hostlink.ServerDeps) {
		cfg.PingTimeout = 100 * time.Millisecond
		cfg.KeepAliveInterval = time.Second
		cfg.WriteTimeout = time.Second
	})
	g := &gate{}
	hung := dialGated(t, c.http.URL, g)
	waitFor(t, c.connects, "host-1")
	old := c.srv.Links()
	g.freeze()
	_, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: c.http.URL, Token: "tok-1"})
	if !errors.Is(err, hostlink.ErrAlreadyConnected) {
		t.Fatalf("dial while the first link is slow: %v, want ErrAlreadyConnected", err)
	}
	if links := c.srv.Links(); len(links) != 1 || links[0].ID != old[0].ID {
		t.Fatalf("links = %+v, want the slow one (%s) held", links, old[0].ID)
	}
	waitFor(t, c.disconnect, "host-1") // keepalive ends the silent link
	second := dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")
	g.thaw()
	select {
	case <-hung.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hung link is still up")
	}
	// A link that ended is replaced without a ping.
	_ = second.Close()
	waitFor(t, c.disconnect, "host-1")
	dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")
}

// admitter is a cluster's admission as a test sets it.
type admitter struct {
	mu       sync.Mutex
	answer   error
	admitted []hostlink.LinkInfo
	released []hostlink.LinkInfo
}

func (a *admitter) admit(_ context.Context, l hostlink.LinkInfo) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.answer == nil {
		a.admitted = append(a.admitted, l)
	}
	return a.answer
}

func (a *admitter) release(_ context.Context, l hostlink.LinkInfo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = append(a.released, l)
}

func (a *admitter) counts() (admitted, released int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.admitted), len(a.released)
}

func TestAdmitDecides(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer error
		is     error // category of the dial error; nil: admitted
		want   string
		retry  time.Duration
	}{
		{"admitted", nil, nil, "", 0},
		{"host disabled", &hostlink.Refusal{Status: http.StatusForbidden, Code: hostlink.CodeHostDisabled,
			Msg: "host h1 is disabled: enable it with `engrams host enable h1`"}, hostlink.ErrUnauthorized, "host h1 is disabled", 0},
		{"another replica holds it", hostlink.AlreadyConnected("h1", "10.1.2.3:4", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 7*time.Second),
			hostlink.ErrAlreadyConnected, "host h1 is already connected from 10.1.2.3:4 since 2026-01-02T03:04:05Z", 7 * time.Second},
		{"the cluster cannot tell", errors.New("database down"), nil, "503", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			adm := &admitter{answer: tt.answer}
			c := newCoordinatorWith(t, "a", "secret", nil, func(_ *hostlink.ServerConfig, d *hostlink.ServerDeps) {
				d.Admit, d.Release = adm.admit, adm.release
			})
			conn, err := hostlink.Dial(t.Context(), hostlink.DialConfig{URL: c.http.URL, Token: "tok-1", Handler: hostHandler(nil)})
			if tt.answer == nil {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				waitFor(t, c.connects, "host-1")
				_ = conn.Close()
				waitFor(t, c.disconnect, "host-1")
				waitCounts(t, adm, 1, 1)
				if adm.admitted[0] != adm.released[0] || adm.admitted[0].TokenID != "tid-tok-1" || adm.admitted[0].ID == "" {
					t.Fatalf("admitted %+v, released %+v", adm.admitted, adm.released)
				}
				return
			}
			if err == nil {
				_ = conn.Close()
				t.Fatal("dial succeeded")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("dial: %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("dial: %v, want it to say %q", err, tt.want)
			}
			if got := hostlink.RetryAfter(err); got != tt.retry {
				t.Errorf("RetryAfter = %s, want %s", got, tt.retry)
			}
			if a, r := adm.counts(); a != 0 || r != 0 || len(c.srv.Links()) != 0 {
				t.Errorf("refused: admitted %d, released %d, links %v", a, r, c.srv.Links())
			}
		})
	}
}

func waitCounts(t *testing.T, a *admitter, admitted, released int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ad, re := a.counts()
		if ad == admitted && re == released {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("admitted %d, released %d; want %d, %d", ad, re, admitted, released)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandlersSeeTheLink: requests a host sends carry its link (id,
// token) for the coordinator's handlers, and CloseLink ends exactly the
// link it names.
func TestHandlersSeeTheLink(t *testing.T) {
	t.Parallel()
	c := newCoordinatorWith(t, "a", "secret", nil, func(_ *hostlink.ServerConfig, d *hostlink.ServerDeps) {
		d.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l, _ := hostlink.LinkFrom(r.Context())
			_ = json.NewEncoder(w).Encode(l)
		})
	})
	conn := dialHost(t, c.http.URL, "tok-1", hostHandler(nil))
	waitFor(t, c.connects, "host-1")
	resp, err := conn.HTTPClient().Get("http://c/whoami")
	if err != nil {
		t.Fatal(err)
	}
	var got hostlink.LinkInfo
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	links := c.srv.Links()
	if len(links) != 1 || got.ID != links[0].ID || got.HostID != "host-1" || got.TokenID != "tid-tok-1" || !strings.HasPrefix(got.Remote, "127.0.0.1:") {
		t.Fatalf("handler saw %+v, server holds %+v", got, links)
	}
	if c.srv.CloseLink("host-1", "another-link") || c.srv.CloseLink("host-2", "") {
		t.Fatal("CloseLink closed a link it does not hold")
	}
	if !c.srv.CloseLink("host-1", got.ID) {
		t.Fatal("CloseLink of the held link: false")
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("link still up after CloseLink")
	}
	waitFor(t, c.disconnect, "host-1")
}

// TestLinkHeldAcrossReplicas: a replica asks another whether it holds a
// host's live link; an answer it cannot get is an error, never a no.
func TestLinkHeldAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t, "secret", nil)
	id := b.srv.Links()[0].ID
	gone := newCoordinator(t, "c", "secret", nil)
	goneURL := gone.http.URL
	gone.http.Close()
	tests := []struct {
		name    string
		from    *coordinator
		link    string
		replica string
		addr    string
		held    bool
		err     bool
	}{
		{"held by the peer", a, id, "b", b.http.URL, true, false},
		{"held here", b, id, "b", "", true, false},
		{"another link", a, "other", "b", b.http.URL, false, false},
		{"not here", a, id, "a", a.http.URL, false, false},
		{"peer unreachable", a, id, "c", goneURL, false, true},
		{"bad address", a, id, "c", "::", false, true},
	}
	for _, tt := range tests {
		held, err := tt.from.router.LinkHeld(t.Context(), "host-1", tt.link, tt.replica, tt.addr)
		if held != tt.held || (err != nil) != tt.err {
			t.Errorf("%s: held %v, err %v; want %v, error %v", tt.name, held, err, tt.held, tt.err)
		}
	}
	wrongSecret := newCoordinator(t, "d", "not-the-secret", nil)
	if _, err := wrongSecret.router.LinkHeld(t.Context(), "host-1", id, "b", b.http.URL); err == nil {
		t.Error("a replica with the wrong cluster secret got an answer")
	}
}
