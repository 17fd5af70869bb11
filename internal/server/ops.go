package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/metrics"
)

// collectTimeout bounds the store read of one scrape of sessions by state.
const collectTimeout = 2 * time.Second

// sessionStates is the engrams_sessions family: sessions by state, read
// from the store at each scrape. A scrape that cannot read the store
// leaves the family out (the other families are still served).
type sessionStates struct {
	count func(ctx context.Context) (map[domain.SessionState]int, error)
	desc  *prometheus.Desc
	log   *slog.Logger
}

func newSessionStates(count func(ctx context.Context) (map[domain.SessionState]int, error), log *slog.Logger) *sessionStates {
	return &sessionStates{count: count, log: log,
		desc: prometheus.NewDesc("engrams_sessions", "Sessions by state (all replicas: read from the database).", []string{"state"}, nil)}
}

func (c *sessionStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sessionStates) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		c.log.Warn("metrics: count sessions by state", "err", err)
		return
	}
	for _, st := range domain.SessionStates { // every state, so a state emptied reads 0
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	for st, n := range counts {
		if !st.Valid() {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(st))
		}
	}
}

// linkCount keeps engrams_host_links at the number of hosts linked to
// this replica: a host whose newer link replaces its older one connects
// again without having disconnected, and counts once.
type linkCount struct {
	met   *metrics.Registry
	mu    sync.Mutex
	hosts map[domain.HostID]bool
}

func (l *linkCount) connected(id domain.HostID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.hosts[id] {
		l.hosts[id] = true
		l.met.HostLinkChanged(1)
	}
}

func (l *linkCount) disconnected(id domain.HostID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hosts[id] {
		delete(l.hosts, id)
		l.met.HostLinkChanged(-1)
	}
}

// checks are the replica's readiness checks: its database, then any the
// caller added.
func (s *Server) checks() []metrics.Check {
	return append([]metrics.Check{{Name: "database", Ready: s.st.Ready}}, s.ready...)
}

// OpsHandler serves /healthz, /readyz and /metrics, for a listener of
// their own (the main listener serves them too).
func (s *Server) OpsHandler() http.Handler { return s.met.OpsHandler(s.checks()...) }
