package automations

import "fmt"

// RunState is where a run is.
type RunState string

// Run states.
const (
	RunQueued     RunState = "queued"     // waiting for a run with its concurrency key (policy queue)
	RunRunning    RunState = "running"    // executing its blocks
	RunWaiting    RunState = "waiting"    // in a wait_idle, or between loop passes
	RunSucceeded  RunState = "succeeded"  // every block done
	RunFailed     RunState = "failed"     // a block failed, or a limit was hit
	RunCancelled  RunState = "cancelled"  // by a user
	RunSuperseded RunState = "superseded" // a newer run with its key took over (policy supersede)
	RunSkipped    RunState = "skipped"    // another run with its key ran (policy skip)
)

// Terminal reports whether nothing happens to a run in s any more.
func (s RunState) Terminal() bool {
	switch s {
	case RunSucceeded, RunFailed, RunCancelled, RunSuperseded, RunSkipped:
		return true
	}
	return false
}

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
func Transition(from RunState, ev RunEvent) (RunState, error) {
	next, ok := map[RunState]map[RunEvent]RunState{
		RunQueued:  {EventStart: RunRunning, EventSkip: RunSkipped, EventCancel: RunCancelled, EventSupersede: RunSuperseded},
		RunRunning: {EventWait: RunWaiting, EventSucceed: RunSucceeded, EventFail: RunFailed, EventCancel: RunCancelled, EventSupersede: RunSuperseded},
		RunWaiting: {EventWake: RunRunning, EventFail: RunFailed, EventCancel: RunCancelled, EventSupersede: RunSuperseded},
	}[from][ev]
	if !ok {
		return from, fmt.Errorf("%w: %s on a %s run", ErrBadTransition, ev, from)
	}
	return next, nil
}
