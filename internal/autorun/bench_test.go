package autorun

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// stepsOnly is a run of 101 cheap steps (the fake tasks answer from
// memory): a task, then 50 loop passes each ending its session.
const stepsOnly = `
name: steps
trigger: {kind: manual}
blocks:
  - {id: task, kind: start_task, profile: p, prompt: go}
  - id: again
    kind: loop
    max: 50
    body:
      - {id: stop, kind: end_session, task: task}
`

// TestBenchStepRecord measures what recording a step costs: the time from
// one step's start to the next's, for blocks that do next to nothing (so
// it is the record: our step row written twice, DBOS's checkpoint, the
// wake-ups), against one plain write to the same database in the same
// run. Gated by ENGRAMS_BENCH=1.
func TestBenchStepRecord(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") != "1" {
		t.Skip("set ENGRAMS_BENCH=1 to measure")
	}
	const runs = 10
	fmt.Printf("%-9s %12s %12s %14s %14s %8s\n", "database", "step p50", "step p95", "1 write p50", "1 write p95", "ratio")
	for _, d := range databases(t) {
		e := newEnv(t, d, "bench", newFakeTasks(t, ""))
		if _, err := e.r.CreateAutomation(t.Context(), domain.FirstOrg, []byte(stepsOnly), false); err != nil {
			t.Fatal(err)
		}
		var steps []time.Duration
		for range runs {
			s, err := e.r.StartRun(t.Context(), domain.FirstOrg, "steps", RunRequest{})
			if err != nil {
				t.Fatal(err)
			}
			e.waitRun(t, s.Run.ID, domain.RunSucceeded)
			rec, err := e.st.ListSteps(t.Context(), s.Run.ID)
			if err != nil || len(rec) != 101 {
				t.Fatalf("%d steps, %v", len(rec), err)
			}
			for i := 1; i < len(rec); i++ {
				steps = append(steps, rec[i].StartedAt.Sub(rec[i-1].StartedAt))
			}
		}
		var writes []time.Duration
		for range 500 {
			start := time.Now()
			if err := e.st.ExecutorHeartbeat(t.Context(), "bench-baseline", time.Now()); err != nil {
				t.Fatal(err)
			}
			writes = append(writes, time.Since(start))
		}
		sp50, sp95, wp50, wp95 := pct(steps, 50), pct(steps, 95), pct(writes, 50), pct(writes, 95)
		fmt.Printf("%-9s %12s %12s %14s %14s %7.1fx\n", d.name, sp50, sp95, wp50, wp95, float64(sp50)/float64(wp50))
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(time.Microsecond)
}
