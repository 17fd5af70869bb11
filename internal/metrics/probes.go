package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Check is one condition a process needs to do its work (the database
// reachable, the host link up): Ready returns nil, or why not.
type Check struct {
	Name  string
	Ready func(ctx context.Context) error
}

// CheckTimeout bounds each readiness check of a /readyz request.
const CheckTimeout = 3 * time.Second

// Paths of the probes and the metrics.
const (
	PathHealth  = "/healthz"
	PathReady   = "/readyz"
	PathMetrics = "/metrics"
)

// Mount serves on mux: /healthz (200 while the process serves), /readyz
// (200, or 503 listing each failing check with its reason) and, unless r
// is nil, /metrics. None asks for credentials: the families carry counts
// and labels (kinds, outcomes, states), never ids.
func (r *Registry) Mount(mux *http.ServeMux, checks ...Check) {
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+PathReady, func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if failed := notReady(req.Context(), checks); len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready\n%s\n", strings.Join(failed, "\n"))
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	if r != nil {
		mux.Handle("GET "+PathMetrics, r.Handler())
	}
}

// OpsHandler is a handler of its own serving what Mount does (a separate
// operations listener).
func (r *Registry) OpsHandler(checks ...Check) http.Handler {
	mux := http.NewServeMux()
	r.Mount(mux, checks...)
	return mux
}

// notReady runs every check, each within CheckTimeout, and lists the
// failing ones as "name: reason".
func notReady(ctx context.Context, checks []Check) []string {
	var failed []string
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		err := c.Ready(cctx)
		cancel()
		if err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	return failed
}
