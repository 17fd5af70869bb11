package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFamiliesMoveAndServe(t *testing.T) {
	t.Parallel()
	r := New()
	r.OpFinished("create", "succeeded", 1500*time.Millisecond)
	r.SnapshotUploaded(4096)
	r.ChunkCacheRead(true)
	r.ChunkCacheRead(false)
	r.HostLinkChanged(1)
	r.GuestBoundExceeded("event_line")
	r.QuotaRefused("events")
	r.EgressEvents("tls", "allow", 3)
	r.EgressEvents("dns", "deny", 0)
	r.EgressDenied("icmp")
	r.EgressDenied("icmp")
	r.PlacementQueued("create")
	r.PlacementRefused("resume")
	r.SessionEvicted()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`engrams_op_duration_seconds_count{kind="create",outcome="succeeded"} 1`,
		`engrams_snapshot_uploaded_bytes_total 4096`,
		`engrams_chunk_cache_requests_total{result="hit"} 1`,
		`engrams_chunk_cache_requests_total{result="miss"} 1`,
		`engrams_host_links 1`,
		`engrams_guest_bound_exceeded_total{bound="event_line"} 1`,
		`engrams_quota_refusals_total{quota="events"} 1`,
		`engrams_egress_events_total{kind="tls",verdict="allow"} 3`,
		`engrams_egress_denied_total{kind="icmp"} 2`,
		`engrams_placement_queued_total{kind="create"} 1`,
		`engrams_placement_refused_total{kind="resume"} 1`,
		`engrams_sessions_evicted_total 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(string(body), `kind="dns"`) {
		t.Error("adding 0 egress events made a series")
	}
}

func TestNilRecordsNothing(t *testing.T) {
	t.Parallel()
	var r *Registry
	r.OpFinished("create", "failed", time.Second)
	r.SnapshotUploaded(1)
	r.ChunkCacheRead(true)
	r.HostLinkChanged(1)
	r.GuestBoundExceeded("x")
	r.QuotaRefused("x")
	r.EgressEvents("dns", "deny", 1)
	r.EgressDenied("udp")
	r.PlacementQueued("create")
	r.PlacementRefused("create")
	r.SessionEvicted()
	if err := r.Register(nil); err != nil {
		t.Fatal(err)
	}
}
