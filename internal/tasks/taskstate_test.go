package tasks

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/domain"
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
	legal := legalTaskMoves()
	if len(legal) != len(taskStatesSpec()) {
		t.Fatalf("the spec covers %d states, there are %d", len(legal), len(taskStatesSpec()))
	}
	for _, s := range taskStatesSpec() {
		if !s.Valid() {
			t.Fatalf("%s is not a task state", s)
		}
		for _, ev := range taskEventsSpec() {
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
					t.Fatalf("refused Transition(%s, %s) moved the task to %s", s, ev, got)
				}
			})
		}
	}
}

// TestTaskEventsAllHappen checks the spec names no event no state accepts,
// so the lists above cannot drift into testing only refusals.
func TestTaskEventsAllHappen(t *testing.T) {
	t.Parallel()
	for _, ev := range taskEventsSpec() {
		n := 0
		for _, moves := range legalTaskMoves() {
			if _, ok := moves[ev]; ok {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no task state accepts %s", ev)
		}
	}
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
