package automations

import (
	"fmt"

	"github.com/engrams/engrams/internal/domain"
)

// RunEvent is what happens to a run.
type RunEvent string

// Run events.
const (
	EventStart     RunEvent = "start"     // its turn came (or it never had to wait)
	EventWait      RunEvent = "wait"      // a block waits for the agent or a deadline
	EventWake      RunEvent = "wake"      // what it waited for happened
	EventSucceed   RunEvent = "succeed"   // its last block finished
	EventFail      RunEvent = "fail"      // a block failed or a limit was hit
	EventCancel    RunEvent = "cancel"    // a user cancelled it
	EventSupersede RunEvent = "supersede" // a newer run with its key started
	EventSkip      RunEvent = "skip"      // a run with its key was already running
)

// ErrBadTransition is the error of a transition a run's state does not
// allow.
var ErrBadTransition = fmt.Errorf("automations: bad run transition")

// Transition is the one rule of run states: the state after ev happens to
// a run in from, or ErrBadTransition.
func Transition(from domain.RunState, ev RunEvent) (domain.RunState, error) {
	next, ok := map[domain.RunState]map[RunEvent]domain.RunState{
		domain.RunQueued:  {EventStart: domain.RunRunning, EventSkip: domain.RunSkipped, EventCancel: domain.RunCancelled, EventSupersede: domain.RunSuperseded},
		domain.RunRunning: {EventWait: domain.RunWaiting, EventSucceed: domain.RunSucceeded, EventFail: domain.RunFailed, EventCancel: domain.RunCancelled, EventSupersede: domain.RunSuperseded},
		domain.RunWaiting: {EventWake: domain.RunRunning, EventFail: domain.RunFailed, EventCancel: domain.RunCancelled, EventSupersede: domain.RunSuperseded},
	}[from][ev]
	if !ok {
		return from, fmt.Errorf("%w: %s on a %s run", ErrBadTransition, ev, from)
	}
	return next, nil
}
