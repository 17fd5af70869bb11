package host_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
)

// memCoordinator serves h on an in-memory network inside a synctest
// bubble; the returned client dials it.
func memCoordinator(h http.Handler) (client *http.Client, l *pipeListener, shutdown func()) {
	l = newPipeListener()
	hs := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(l)
	}()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return l.dial(ctx) }}
	return &http.Client{Transport: tr}, l, func() {
		_ = hs.Close()
		<-served
		tr.CloseIdleConnections()
	}
}

func newMemAgent(t *testing.T, token string, client *http.Client, w *world, log *syncBuffer) *host.Agent {
	t.Helper()
	a, err := host.New(host.Config{
		CoordinatorURL: "http://coordinator",
		Token:          token,
		DataDir:        t.TempDir(),
		Capacity:       domain.Capacity{MemoryMiB: 1024, VCPUs: 2},
	}, host.Deps{Backend: fakeBackend{w}, HTTPClient: client, Logger: newLogger(log)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRefusedDialRetriesSlowly runs in a synctest bubble: every dial fails
// before a yamux session exists (see TestHeartbeatEveryInterval).
func TestRefusedDialRetriesSlowly(t *testing.T) {
	t.Parallel()
	refuseVersion := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hostlink.HeaderVersion, "2")
		hostlink.WriteError(w, http.StatusBadRequest, "version_mismatch",
			"host speaks hostlink protocol 1, this coordinator speaks 2: upgrade the host agent to a release that speaks protocol 2")
	})
	tests := []struct {
		name        string
		handler     http.Handler
		token       string
		unreachable bool
		minAttempts int64
		maxAttempts int64
		wantLog     string
		wantLevel   string
	}{
		{"version mismatch", refuseVersion, "tok", false, 5, 11, "upgrade the host agent", "level=ERROR"},
		{"bad token", nil, "wrong", false, 5, 11, "token", "level=ERROR"},
		{"unreachable", nil, "tok", true, 20, 60, "connection refused", "level=WARN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c := newCoord(time.Hour)
				var attempts atomic.Int64
				h := tt.handler
				if h == nil {
					h = c.mux
				}
				counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					attempts.Add(1)
					h.ServeHTTP(w, r)
				})
				client, l, shutdown := memCoordinator(counted)
				if tt.unreachable {
					_ = l.Close()
					client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
						attempts.Add(1)
						return l.dial(ctx)
					}}
				}
				log := &syncBuffer{}
				w := newWorld()
				a := newMemAgent(t, tt.token, client, w, log)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- a.Run(ctx) }()
				time.Sleep(10 * time.Minute)
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
				shutdown()
				if tt.unreachable {
					client.Transport.(*http.Transport).CloseIdleConnections()
				}
				if n := attempts.Load(); n < tt.minAttempts || n > tt.maxAttempts {
					t.Errorf("%d dial attempts in 10 minutes, want %d..%d", n, tt.minAttempts, tt.maxAttempts)
				}
				out := log.String()
				if !strings.Contains(out, tt.wantLog) {
					t.Errorf("log lacks %q:\n%s", tt.wantLog, out)
				}
				// The reason is logged once at its level; repeats go to debug.
				if n := strings.Count(out, tt.wantLevel); n != 1 {
					t.Errorf("%d lines at %s, want 1:\n%s", n, tt.wantLevel, out)
				}
			})
		})
	}
}
