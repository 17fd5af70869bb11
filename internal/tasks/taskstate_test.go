package tasks

import (
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/testutil"
)

// taskStatesSpec and taskEventsSpec are every task state and every state
// event, listed here apart from the implementation.
func taskStatesSpec() []domain.TaskState {
	return []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle, domain.TaskStopped, domain.TaskFailed}
}

func taskEventsSpec() []StateEvent {
	return []StateEvent{TaskSetupDone, TaskSetupFailed, TaskRunStarted, TaskHarnessError, TaskTurnEnded, TaskStopRequested, TaskContinued}
}

// legalTaskMoves is the spec of task states, written apart from
// Transition's table: the events each state accepts and where they lead.
// Every pair not listed must be refused.
func legalTaskMoves() map[domain.TaskState]map[StateEvent]domain.TaskState {
	return map[domain.TaskState]map[StateEvent]domain.TaskState{
		domain.TaskStarting: {
			TaskSetupDone:     domain.TaskRunning,
			TaskSetupFailed:   domain.TaskFailed,
			TaskRunStarted:    domain.TaskRunning, // the harness's run_started came before setup marked it running
			TaskHarnessError:  domain.TaskStarting,
			TaskTurnEnded:     domain.TaskIdle,
			TaskStopRequested: domain.TaskStopped,
		},
		domain.TaskRunning: {
			TaskRunStarted:    domain.TaskRunning,
			TaskHarnessError:  domain.TaskRunning,
			TaskTurnEnded:     domain.TaskIdle,
			TaskStopRequested: domain.TaskStopped,
			TaskContinued:     domain.TaskStarting,
		},
		domain.TaskIdle: {
			TaskRunStarted:    domain.TaskRunning,
			TaskHarnessError:  domain.TaskIdle,
			TaskTurnEnded:     domain.TaskIdle,
			TaskStopRequested: domain.TaskStopped,
			TaskContinued:     domain.TaskStarting,
		},
		domain.TaskStopped: {},
		domain.TaskFailed:  {TaskStopRequested: domain.TaskStopped},
	}
}

func TestTaskTransitionEveryPair(t *testing.T) {
	t.Parallel()
	for _, s := range taskStatesSpec() {
		if !s.Valid() {
			t.Fatalf("%s is not a task state", s)
		}
	}
	testutil.CheckTransitions(t, testutil.Machine[domain.TaskState, StateEvent]{States: taskStatesSpec(), Events: taskEventsSpec(),
		Legal: legalTaskMoves(), Transition: Transition, ErrBad: ErrBadTransition})
}

func TestStatesAllowing(t *testing.T) {
	t.Parallel()
	live := []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle}
	tests := []struct {
		evs  []StateEvent
		want []domain.TaskState
	}{
		{[]StateEvent{TaskSetupDone}, []domain.TaskState{domain.TaskStarting}},
		{[]StateEvent{TaskSetupFailed}, []domain.TaskState{domain.TaskStarting}},
		{[]StateEvent{TaskRunStarted, TaskHarnessError, TaskTurnEnded}, live},
		{[]StateEvent{TaskStopRequested}, []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle, domain.TaskFailed}},
		{[]StateEvent{TaskContinued}, []domain.TaskState{domain.TaskRunning, domain.TaskIdle}},
		{[]StateEvent{TaskSetupDone, TaskContinued}, nil},
		{nil, taskStatesSpec()},
	}
	for _, tt := range tests {
		if got := statesAllowing(tt.evs...); !slices.Equal(got, tt.want) {
			t.Errorf("statesAllowing(%v) = %v, want %v", tt.evs, got, tt.want)
		}
	}
}
