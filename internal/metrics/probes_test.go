package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbes(t *testing.T) {
	t.Parallel()
	up := Check{Name: "database", Ready: func(context.Context) error { return nil }}
	down := Check{Name: "host_link", Ready: func(context.Context) error { return errors.New("no link to the coordinator") }}
	cases := []struct {
		name     string
		reg      *Registry
		checks   []Check
		path     string
		wantCode int
		wantBody string
	}{
		{"healthz", New(), []Check{down}, PathHealth, 200, "ok\n"},
		{"ready", New(), []Check{up}, PathReady, 200, "ok\n"},
		{"ready without checks", New(), nil, PathReady, 200, "ok\n"},
		{"not ready says why", New(), []Check{up, down}, PathReady, 503, "not ready\nhost_link: no link to the coordinator\n"},
		{"metrics", New(), nil, PathMetrics, 200, "engrams_host_links 0"},
		{"no registry, no metrics", nil, nil, PathMetrics, 404, ""},
		{"no registry, still probes", nil, []Check{down}, PathReady, 503, "host_link"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			tc.reg.OpsHandler(tc.checks...).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tc.wantCode || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d with %q", tc.path, rec.Code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

// TestReadyCheckIsBounded: a check that hangs gets a context with a
// deadline, so /readyz answers.
func TestReadyCheckIsBounded(t *testing.T) {
	t.Parallel()
	hang := Check{Name: "database", Ready: func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		<-ctx.Done()
		return ctx.Err()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the request is gone: the check ends at once
	failed := notReady(ctx, []Check{hang})
	if len(failed) != 1 || !strings.Contains(failed[0], "context canceled") {
		t.Fatalf("failed = %q", failed)
	}
}
