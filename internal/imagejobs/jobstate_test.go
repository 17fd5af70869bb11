package imagejobs

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// jobStatesSpec and jobEventsSpec are every image job state and event,
// listed here apart from the implementation.
func jobStatesSpec() []domain.ImageJobState {
	return []domain.ImageJobState{domain.JobPending, domain.JobMaterializing, domain.JobCapturing, domain.JobReady, domain.JobFailed}
}

func jobEventsSpec() []JobEvent { return []JobEvent{JobClaim, JobCapture, JobSucceed, JobFail} }

// legalJobMoves is the spec of image job states, written apart from
// Transition's table. Every pair not listed must be refused.
func legalJobMoves() map[domain.ImageJobState]map[JobEvent]domain.ImageJobState {
	return map[domain.ImageJobState]map[JobEvent]domain.ImageJobState{
		domain.JobPending: {JobClaim: domain.JobMaterializing},
		domain.JobMaterializing: {
			JobClaim:   domain.JobMaterializing, // its lease lapsed: claimed again, from the start
			JobCapture: domain.JobCapturing,
			JobSucceed: domain.JobReady, // a base of the same digest and settings reused
			JobFail:    domain.JobFailed,
		},
		domain.JobCapturing: {
			JobClaim:   domain.JobMaterializing,
			JobSucceed: domain.JobReady,
			JobFail:    domain.JobFailed,
		},
		domain.JobReady:  {},
		domain.JobFailed: {},
	}
}

func TestJobTransitionEveryPair(t *testing.T) {
	t.Parallel()
	legal := legalJobMoves()
	if len(legal) != len(jobStatesSpec()) {
		t.Fatalf("the spec covers %d states, there are %d", len(legal), len(jobStatesSpec()))
	}
	for _, s := range jobStatesSpec() {
		for _, ev := range jobEventsSpec() {
			t.Run(fmt.Sprintf("%s/%s", s, ev), func(t *testing.T) {
				t.Parallel()
				got, err := Transition(s, ev)
				want, ok := legal[s][ev]
				switch {
				case ok && err != nil:
					t.Fatalf("Transition(%s, %s) refused: %v; want %s", s, ev, err, want)
				case ok && got != want:
					t.Fatalf("Transition(%s, %s) = %s, want %s", s, ev, got, want)
				case !ok && !errors.Is(err, ErrBadTransition):
					t.Fatalf("Transition(%s, %s) = %s, %v; want ErrBadTransition", s, ev, got, err)
				case !ok && got != s:
					t.Fatalf("refused Transition(%s, %s) moved the job to %s", s, ev, got)
				}
			})
		}
	}
}

// TestJobSpecAgreesWithActive checks the spec against
// domain.ImageJobState.Active (exactly the active states take events) and
// that each event is accepted somewhere, so the lists cannot drift into
// testing only refusals.
func TestJobSpecAgreesWithActive(t *testing.T) {
	t.Parallel()
	for s, moves := range legalJobMoves() {
		if len(moves) > 0 != s.Active() {
			t.Errorf("%s: %d events accepted, active %v", s, len(moves), s.Active())
		}
	}
	for _, ev := range jobEventsSpec() {
		n := 0
		for _, moves := range legalJobMoves() {
			if _, ok := moves[ev]; ok {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no job state accepts %s", ev)
		}
	}
}

// TestJobRunMovesByTransition checks a run's state changes only as
// Transition says: a refused event leaves the run as it was, unsaved.
func TestJobRunMovesByTransition(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	r := &jobRun{c: &Images{now: func() time.Time { return now }}, state: domain.JobMaterializing, stages: map[string]int64{}}
	if err := r.move(JobCapture, "place"); err != nil || r.state != domain.JobCapturing || r.stage != "place" || !r.dirty {
		t.Fatalf("capture from materializing: %v, run %s %q dirty %v", err, r.state, r.stage, r.dirty)
	}
	r.dirty = false
	if err := r.move(JobCapture, "again"); !errors.Is(err, ErrBadTransition) || r.state != domain.JobCapturing || r.stage != "place" || r.dirty {
		t.Fatalf("capture from capturing: %v, run %s %q dirty %v; want it refused, nothing changed", err, r.state, r.stage, r.dirty)
	}
	if to, err := r.next(JobFail); err != nil || to != domain.JobFailed || r.state != domain.JobCapturing {
		t.Fatalf("next(fail) = %s, %v; run %s", to, err, r.state)
	}
	r.state = domain.JobReady
	if _, err := r.next(JobFail); !errors.Is(err, ErrBadTransition) {
		t.Fatalf("next(fail) of a ready job: %v, want ErrBadTransition", err)
	}
}
