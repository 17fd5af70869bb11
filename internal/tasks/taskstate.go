package tasks

import (
	"errors"
	"fmt"
	"slices"

	"github.com/engrams/engrams/internal/domain"
)

// StateEvent is something that happened to a task that may move its state.
// (A task's conversation is made of domain.TaskEvent; these are not those,
// though some are caused by one.)
type StateEvent string

// Task state events, named for what happened rather than for the state
// they lead to.
const (
	// TaskSetupDone: its session is active, its repositories are cloned and
	// its prompt is handed to the harness.
	TaskSetupDone StateEvent = "setup_done"
	// TaskSetupFailed: its setup failed (the session never became active, a
	// clone failed, ...).
	TaskSetupFailed StateEvent = "setup_failed"
	// TaskRunStarted: the harness started a run on a prompt (a run_started
	// event).
	TaskRunStarted StateEvent = "run_started"
	// TaskHarnessError: the harness reported an error (an error event); the
	// task's error changes, its state does not.
	TaskHarnessError StateEvent = "harness_error"
	// TaskTurnEnded: the harness finished a turn (an idle event).
	TaskTurnEnded StateEvent = "turn_ended"
	// TaskStopRequested: a user stopped it.
	TaskStopRequested StateEvent = "stop_requested"
	// TaskContinued: a follow-up moved it to a new session, its previous one
	// having ended.
	TaskContinued StateEvent = "continued"
)

// ErrBadTransition is the error of an event a task's state does not allow.
var ErrBadTransition = errors.New("tasks: bad task transition")

// Transition is the one rule of task states: the state a task in from
// moves to when ev happens, or from and an error wrapping ErrBadTransition.
// A stopped task takes no event; a failed one only a stop.
func Transition(from domain.TaskState, ev StateEvent) (domain.TaskState, error) {
	next, ok := map[domain.TaskState]map[StateEvent]domain.TaskState{
		domain.TaskStarting: {TaskSetupDone: domain.TaskRunning, TaskSetupFailed: domain.TaskFailed, TaskRunStarted: domain.TaskRunning,
			TaskHarnessError: domain.TaskStarting, TaskTurnEnded: domain.TaskIdle, TaskStopRequested: domain.TaskStopped},
		domain.TaskRunning: {TaskRunStarted: domain.TaskRunning, TaskHarnessError: domain.TaskRunning, TaskTurnEnded: domain.TaskIdle,
			TaskStopRequested: domain.TaskStopped, TaskContinued: domain.TaskStarting},
		domain.TaskIdle: {TaskRunStarted: domain.TaskRunning, TaskHarnessError: domain.TaskIdle, TaskTurnEnded: domain.TaskIdle,
			TaskStopRequested: domain.TaskStopped, TaskContinued: domain.TaskStarting},
		domain.TaskFailed: {TaskStopRequested: domain.TaskStopped},
	}[from][ev]
	if !ok {
		return from, fmt.Errorf("%w: %s on a %s task", ErrBadTransition, ev, from)
	}
	return next, nil
}

// statesAllowing lists the task states in which every one of evs may
// happen: the condition of a store write that applies them, so a task that
// moved on meanwhile (stopped, failed) is left as it is.
func statesAllowing(evs ...StateEvent) []domain.TaskState {
	all := []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle, domain.TaskStopped, domain.TaskFailed}
	return slices.DeleteFunc(all, func(s domain.TaskState) bool {
		return slices.ContainsFunc(evs, func(ev StateEvent) bool {
			_, err := Transition(s, ev)
			return err != nil
		})
	})
}
