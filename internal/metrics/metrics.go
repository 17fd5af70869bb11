package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is one process's metrics. Its zero value is not usable; use
// New. Every method is safe for concurrent use, and a nil *Registry
// records nothing, so parts built without metrics need no checks.
type Registry struct {
	reg        *prometheus.Registry
	opSeconds  *prometheus.HistogramVec
	uploaded   prometheus.Counter
	chunkCache *prometheus.CounterVec
	hostLinks  prometheus.Gauge
	guestBound *prometheus.CounterVec
	quota      *prometheus.CounterVec
	egress     *prometheus.CounterVec
	denied     *prometheus.CounterVec
	queued     *prometheus.CounterVec
	refused    *prometheus.CounterVec
	evicted    prometheus.Counter
}

// New returns a registry with the engrams_ families and the Go runtime's
// and process's collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.opSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "engrams_op_duration_seconds", Help: "Lifecycle operations by kind and outcome, from claim to finish.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"kind", "outcome"})
	r.uploaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "engrams_snapshot_uploaded_bytes_total", Help: "Bytes of snapshot chunks uploaded to the blob store (chunks it lacked).",
	})
	r.chunkCache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_chunk_cache_requests_total", Help: "Reads of the host's chunk cache by result (hit, miss).",
	}, []string{"result"})
	r.hostLinks = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "engrams_host_links", Help: "Host links this replica holds now.",
	})
	r.guestBound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_guest_bound_exceeded_total", Help: "Streams from guests ended because they exceeded a bound, by bound.",
	}, []string{"bound"})
	r.quota = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_quota_refusals_total", Help: "Guest data dropped over a per-task quota, by quota.",
	}, []string{"quota"})
	r.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_egress_events_total", Help: "DNS queries, connections and dropped flows of guests that hosts reported, by kind (dns, tcp, tls, http, connect, udp, icmp, ip; dropped: lost by the host or over its rate there) and verdict (allow, deny).",
	}, []string{"kind", "verdict"})
	r.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_egress_denied_total", Help: "Queries, connections and flows of guests this host's egress paths refused or its machines' networks dropped, by kind (dns, tcp, tls, http, connect, udp, icmp, ip), counted where they happen, before the per-session rate limit.",
	}, []string{"kind"})
	r.queued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_placement_queued_total", Help: "Creates and resumes that found every host full and waited in the queue for room, by op kind (create, resume).",
	}, []string{"kind"})
	r.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "engrams_placement_refused_total", Help: "Creates and resumes refused (503 with Retry-After) because no room came before the queue's deadline, by op kind.",
	}, []string{"kind"})
	r.evicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "engrams_sessions_evicted_total", Help: "Idle sessions suspended to make room for another session on a full host.",
	})
	r.chunkCache.WithLabelValues("hit") // both results read 0 before the first read
	r.chunkCache.WithLabelValues("miss")
	r.reg.MustRegister(r.opSeconds, r.uploaded, r.chunkCache, r.hostLinks, r.guestBound, r.quota, r.egress, r.denied,
		r.queued, r.refused, r.evicted, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the registry in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// Register adds a collector (one that reads its values at scrape time,
// such as sessions by state).
func (r *Registry) Register(c prometheus.Collector) error {
	if r == nil {
		return nil
	}
	return r.reg.Register(c)
}

// OpFinished records one lifecycle op: its kind ("create", "resume", ...),
// outcome ("succeeded", "failed", "fenced", "retried") and duration.
func (r *Registry) OpFinished(kind, outcome string, d time.Duration) {
	if r == nil {
		return
	}
	r.opSeconds.WithLabelValues(kind, outcome).Observe(d.Seconds())
}

// SnapshotUploaded adds the bytes one snapshot uploaded.
func (r *Registry) SnapshotUploaded(bytes int64) {
	if r == nil || bytes <= 0 {
		return
	}
	r.uploaded.Add(float64(bytes))
}

// ChunkCacheRead records one read of the chunk cache.
func (r *Registry) ChunkCacheRead(hit bool) {
	if r == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	r.chunkCache.WithLabelValues(result).Inc()
}

// HostLinkChanged moves the count of host links held by delta (+1 on
// connect, -1 on disconnect).
func (r *Registry) HostLinkChanged(delta int) {
	if r == nil {
		return
	}
	r.hostLinks.Add(float64(delta))
}

// GuestBoundExceeded records a guest stream ended over a bound (e.g.
// "event_line", "tunnel_header").
func (r *Registry) GuestBoundExceeded(bound string) {
	if r == nil {
		return
	}
	r.guestBound.WithLabelValues(bound).Inc()
}

// QuotaRefused records guest data dropped over a per-task quota (e.g.
// "event_bytes", "events", "ingest_rate", "rewinds").
func (r *Registry) QuotaRefused(quota string) {
	if r == nil {
		return
	}
	r.quota.WithLabelValues(quota).Inc()
}

// EgressEvents adds n egress events of a kind ("dns", "tls", ...) and
// verdict ("allow", "deny") that a host reported.
func (r *Registry) EgressEvents(kind, verdict string, n int) {
	if r == nil || n <= 0 {
		return
	}
	r.egress.WithLabelValues(kind, verdict).Add(float64(n))
}

// EgressDenied counts one query, connection or flow of a guest that this
// host's egress path refused or dropped, by kind.
func (r *Registry) EgressDenied(kind string) {
	if r == nil {
		return
	}
	r.denied.WithLabelValues(kind).Inc()
}

// PlacementQueued counts an op (kind "create" or "resume") that found
// every host full and waits in the queue for room.
func (r *Registry) PlacementQueued(kind string) {
	if r == nil {
		return
	}
	r.queued.WithLabelValues(kind).Inc()
}

// PlacementRefused counts an op refused because no room came in time.
func (r *Registry) PlacementRefused(kind string) {
	if r == nil {
		return
	}
	r.refused.WithLabelValues(kind).Inc()
}

// SessionEvicted counts an idle session suspended to make room.
func (r *Registry) SessionEvicted() {
	if r == nil {
		return
	}
	r.evicted.Inc()
}
