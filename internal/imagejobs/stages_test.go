package imagejobs

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// TestStageTimesAddUpToTheWallTime (issue 26): an image's stage times are
// disjoint, so what they add up to (the CLI's and dashboard's "Took") is
// the time the job took, not more: the capture host's own stages replace
// the host call's time rather than adding to it.
func TestStageTimesAddUpToTheWallTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	now := t0
	r := &jobRun{c: &Images{now: func() time.Time { return now }}, state: domain.JobMaterializing, stages: map[string]int64{}}
	after := func(d time.Duration) { now = now.Add(d) }
	r.progress("resolve", 0, 0)
	after(time.Second)
	r.progress("pull", 0, 0)
	after(3 * time.Second)
	if err := r.move(JobCapture, "place"); err != nil {
		t.Fatal(err)
	}
	after(time.Second)
	r.progress(StageOnHost, 0, 0)
	after(10 * time.Second) // the host call
	r.addStages(map[string]int64{"fetch_rootfs": 1000, "boot": 4000, "warmup": 3000, "snapshot": 1000, "upload": 500})
	after(200 * time.Millisecond) // commit
	r.closeStageLocked(now)
	var sum int64
	for _, v := range r.stages {
		sum += v
	}
	if wall := now.Sub(t0).Milliseconds(); sum != wall {
		t.Errorf("stages %v add up to %d ms; the job took %d ms", r.stages, sum, wall)
	}
	want := map[string]int64{"resolve": 1000, "pull": 3000, "place": 1000, StageOnHost: 700,
		"fetch_rootfs": 1000, "boot": 4000, "warmup": 3000, "snapshot": 1000, "upload": 500}
	for k, v := range want {
		if r.stages[k] != v {
			t.Errorf("stage %s: %d ms, want %d (all: %v)", k, r.stages[k], v, r.stages)
		}
	}
	if len(r.stages) != len(want) {
		t.Errorf("stages %v, want %v", r.stages, want)
	}
}
