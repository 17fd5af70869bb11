package imagejobs

import (
	"errors"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/testutil"
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
	testutil.CheckTransitions(t, testutil.Machine[domain.ImageJobState, JobEvent]{States: jobStatesSpec(), Events: jobEventsSpec(),
		Legal: legalJobMoves(), Transition: Transition, ErrBad: ErrBadTransition})
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
