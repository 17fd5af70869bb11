package imagejobs

import (
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
)

// JobEvent is something that happened to an image job that moves its
// state.
type JobEvent string

// Image job events, named for what happened.
const (
	// JobClaim: a runner claimed the job (store.ClaimJob): a pending one, or
	// an active one whose runner stopped without an answer (its lease
	// lapsed). Every claim starts over from materializing.
	JobClaim JobEvent = "claim"
	// JobCapture: its root filesystem is built; a host captures the base
	// snapshot next.
	JobCapture JobEvent = "capture"
	// JobSucceed: its image has a base snapshot, captured or reused from a
	// ready image of the same digest and settings (store.CompleteImageJob).
	JobSucceed JobEvent = "succeed"
	// JobFail: it failed for a reason of its own (final).
	JobFail JobEvent = "fail"
)

// ErrBadTransition is the error of an event an image job's state does not
// allow.
var ErrBadTransition = errors.New("imagejobs: bad image job transition")

// Transition is the one rule of image job states: the state a job in from
// moves to when ev happens, or from and an error wrapping
// ErrBadTransition. A ready or failed job takes no event.
func Transition(from domain.ImageJobState, ev JobEvent) (domain.ImageJobState, error) {
	next, ok := map[domain.ImageJobState]map[JobEvent]domain.ImageJobState{
		domain.JobPending: {JobClaim: domain.JobMaterializing},
		domain.JobMaterializing: {JobClaim: domain.JobMaterializing, JobCapture: domain.JobCapturing,
			JobSucceed: domain.JobReady, JobFail: domain.JobFailed},
		domain.JobCapturing: {JobClaim: domain.JobMaterializing, JobSucceed: domain.JobReady, JobFail: domain.JobFailed},
	}[from][ev]
	if !ok {
		return from, fmt.Errorf("%w: %s on a %s job", ErrBadTransition, ev, from)
	}
	return next, nil
}
