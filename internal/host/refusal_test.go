package host_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
)

// quiet is how long a refused agent must stay away in these tests: far
// less than any backoff it is given, so a slow machine cannot fail them.
const quiet = 1500 * time.Millisecond

// TestRefusedHeartbeatEndsLink: a heartbeat the coordinator refuses (token
// revoked, host disabled, another link took over) ends the agent's link at
// once, the agent says why, and it does not redial right away.
func TestRefusedHeartbeatEndsLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ref  hostlink.Refusal
		log  string
	}{
		{"token revoked", hostlink.Refusal{Status: http.StatusUnauthorized, Code: hostlink.CodeUnauthorized, Msg: "the token host h1 linked with was revoked"},
			"coordinator refused this host"},
		{"host disabled", hostlink.Refusal{Status: http.StatusForbidden, Code: hostlink.CodeHostDisabled, Msg: "host h1 is disabled"},
			"the host is disabled or deleted"},
		{"superseded", hostlink.Refusal{Status: http.StatusConflict, Code: hostlink.CodeSuperseded, Msg: "this link no longer holds host h1", RetryAfter: time.Minute},
			"another agent with this host's token holds the host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCoord(20 * time.Millisecond)
			var refuse atomic.Bool
			var refused atomic.Int32
			inner := c.deps.Handler
			c.deps.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == hostlink.PathHeartbeat && refuse.Load() {
					refused.Add(1)
					ref := tt.ref
					hostlink.WriteRefusal(w, &ref)
					return
				}
				inner.ServeHTTP(w, r)
			})
			c.srv = hostlink.NewServer(hostlink.ServerConfig{}, c.deps)
			var logs syncBuffer
			w := newWorld()
			t.Cleanup(w.destroyAll)
			runAgentWith(t, serve(t, c), t.TempDir(), w, func(_ *host.Config, d *host.Deps) { d.Logger = newLogger(&logs) })
			recv(t, c.registers, nil)
			recv(t, c.heartbeats, nil)
			refuse.Store(true)
			deadline := time.Now().Add(wait)
			for len(c.server().Links()) > 0 {
				if time.Now().After(deadline) {
					t.Fatal("the agent kept its link after a refused heartbeat")
				}
				time.Sleep(10 * time.Millisecond)
			}
			drain(c.registers)
			time.Sleep(quiet)
			if n := len(c.registers); n > 0 {
				t.Fatalf("the agent registered again %d times within %s of the refusal", n, quiet)
			}
			if n := refused.Load(); n != 1 {
				t.Fatalf("%d heartbeats refused; want the link to end at the first", n)
			}
			if out := logs.String(); !strings.Contains(out, tt.log) || !strings.Contains(out, tt.ref.Msg) {
				t.Fatalf("the agent's log does not say %q and %q:\n%s", tt.log, tt.ref.Msg, out)
			}
		})
	}
}

// TestSecondAgentBacksOff: an agent refused at connect because another
// agent's link holds the host logs it clearly and waits at least the
// Retry-After it was given before it asks again.
func TestSecondAgentBacksOff(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	var mu sync.Mutex
	var asked []time.Time
	c.deps.Admit = func(context.Context, hostlink.LinkInfo) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, time.Now())
		return hostlink.AlreadyConnected("h1", "10.0.0.7:4711", time.Now().Add(-time.Hour), time.Minute)
	}
	c.srv = hostlink.NewServer(hostlink.ServerConfig{}, c.deps)
	var logs syncBuffer
	w := newWorld()
	t.Cleanup(w.destroyAll)
	runAgentWith(t, serve(t, c), t.TempDir(), w, func(_ *host.Config, d *host.Deps) { d.Logger = newLogger(&logs) })
	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		n := len(asked)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past its own first backoff (at most 2 s): only Retry-After keeps it away.
	const away = 2500 * time.Millisecond
	time.Sleep(away)
	mu.Lock()
	n := len(asked)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("the refused agent asked %d times within %s; want once (Retry-After is a minute)", n, away)
	}
	for _, want := range []string{"another agent with this host's token holds the host", "host h1 is already connected from 10.0.0.7:4711"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("the agent's log lacks %q:\n%s", want, logs.String())
		}
	}
}
