package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// serve runs a replica over st on a loopback port until the test ends and
// returns its base URL.
func serve(t *testing.T, st store.Store, deps server.Deps) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	deps.Store = st
	srv, err := server.New(server.Config{AdvertiseURL: url, Version: "test"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica: %v", err)
		}
	})
	return url
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "engrams.db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestProbesOnTheMainListener: /healthz answers while the process runs,
// /readyz follows the database and the checks the caller adds, and
// /metrics carries sessions by state read from the store.
func TestProbesOnTheMainListener(t *testing.T) {
	t.Parallel()
	hostLink := func(context.Context) error { return nil }
	cases := []struct {
		name      string
		closeDB   bool
		extra     []metrics.Check
		wantReady int
		wantBody  string
	}{
		{"ready", false, nil, 200, "ok"},
		{"database closed", true, nil, 503, "database: check database: sql: database is closed"},
		{"host link down", false, []metrics.Check{{Name: "host_link", Ready: func(context.Context) error { return errNoLink }}}, 503, "host_link: no link"},
		{"host link up", false, []metrics.Check{{Name: "host_link", Ready: hostLink}}, 200, "ok"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := openSQLite(t)
			url := serve(t, st, server.Deps{Metrics: metrics.New(), Ready: tc.extra})
			if tc.closeDB {
				st.Close()
			}
			if code, body := get(t, url+"/healthz"); code != 200 || body != "ok\n" {
				t.Fatalf("healthz = %d %q", code, body)
			}
			if code, body := get(t, url+"/readyz"); code != tc.wantReady || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("readyz = %d %q, want %d with %q", code, body, tc.wantReady, tc.wantBody)
			}
		})
	}
}

var errNoLink = errorString("no link")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestMetricsCountSessionsByState: engrams_sessions reads the store at
// each scrape, every state listed; a store that cannot answer leaves the
// family out but /metrics is still served.
func TestMetricsCountSessionsByState(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	ops := serve(t, st, server.Deps{Metrics: metrics.New()})
	for i, id := range []domain.SessionID{"s1", "s2"} {
		if _, _, _, err := st.CreateSession(t.Context(), store.NewSession{ID: id, OpID: "op" + string(id), At: time.Now()}); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	code, body := get(t, ops+"/metrics")
	for _, want := range []string{`engrams_sessions{state="created"} 2`, `engrams_sessions{state="idle"} 0`, `engrams_host_links 0`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("metrics (%d) lack %q:\n%s", code, want, body)
		}
	}
	st.Close()
	code, body = get(t, ops+"/metrics")
	if code != 200 || strings.Contains(body, "engrams_sessions{") || !strings.Contains(body, "engrams_host_links") {
		t.Fatalf("metrics with the store closed = %d:\n%s", code, body)
	}
}

// TestReadyzFollowsPostgres: /readyz fails while the replica's Postgres is
// stopped and recovers once it is back (a cluster of the test's own).
func TestReadyzFollowsPostgres(t *testing.T) {
	t.Parallel()
	pg := testutil.NewPostgresCluster(t)
	st, err := postgres.Open(t.Context(), postgres.Config{URL: pg.URL}, postgres.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	url := serve(t, st, server.Deps{Metrics: metrics.New()})
	if code, body := get(t, url+"/readyz"); code != 200 {
		t.Fatalf("readyz with postgres up = %d %q", code, body)
	}
	pg.Stop(t)
	if code, body := get(t, url+"/readyz"); code != 503 || !strings.Contains(body, "database: ") {
		t.Fatalf("readyz with postgres stopped = %d %q, want 503 naming the database", code, body)
	}
	if code, body := get(t, url+"/healthz"); code != 200 {
		t.Fatalf("healthz with postgres stopped = %d %q: the process is up", code, body)
	}
	pg.Start(t)
	// The pool reconnects on its next use: a few requests may still find
	// connections the stop broke.
	var code int
	var body string
	for range 20 {
		if code, body = get(t, url+"/readyz"); code == 200 {
			return
		}
	}
	t.Fatalf("readyz after postgres came back = %d %q", code, body)
}
