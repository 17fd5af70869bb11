package lifecycle

import (
	"errors"
	"fmt"
	"testing"
)

// legal is the spec, written independently of the implementation's table:
// one row per state listing the events it accepts. Every pair not listed
// must be refused.
var legal = map[State]map[Event]State{
	Created: {Place: Starting, Unplaceable: Dead, DeleteRequested: Completed, TimeLimit: Dead},
	Starting: {Started: Active, StartFailed: Dead, Requeue: Created, DeleteRequested: Deleting,
		HeartbeatLost: HostLost, TimeLimit: Deleting},
	Active: {SuspendRequested: Suspending, DeleteRequested: Deleting,
		HeartbeatLost: HostLost, TimeLimit: Deleting},
	Suspending: {Snapshotted: Idle, SnapshotFailed: Active, DeleteRequested: Deleting,
		HeartbeatLost: HostLost, TimeLimit: Deleting},
	Idle: {ResumeRequested: Resuming, DeleteRequested: Completed, Unrestorable: Dead, TimeLimit: Dead},
	Resuming: {Resumed: Active, ResumeFailed: Idle, Unrestorable: Dead, DeleteRequested: Deleting,
		HeartbeatLost: HostLost, TimeLimit: Deleting},
	Deleting:  {Destroyed: Completed, HeartbeatLost: Completed, Expired: Dead},
	HostLost:  {Recovered: Idle, NotRecoverable: Dead, DeleteRequested: Completed, TimeLimit: Dead},
	Completed: {},
	Dead:      {},
}

func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	if len(legal) != len(States) {
		t.Fatalf("spec covers %d states, package has %d", len(legal), len(States))
	}
	for _, s := range States {
		for _, e := range Events {
			t.Run(fmt.Sprintf("%s/%s", s, e), func(t *testing.T) {
				t.Parallel()
				got, err := Transition(s, e)
				want, ok := legal[s][e]
				switch {
				case ok && err != nil:
					t.Fatalf("Transition(%s, %s) refused: %v; want %s", s, e, err, want)
				case ok && got != want:
					t.Fatalf("Transition(%s, %s) = %s, want %s", s, e, got, want)
				case !ok && !errors.Is(err, ErrIllegal):
					t.Fatalf("Transition(%s, %s) = %s, %v; want ErrIllegal", s, e, got, err)
				case !ok && got != s:
					t.Fatalf("refused Transition(%s, %s) changed state to %s", s, e, got)
				}
			})
		}
	}
}

func TestTerminalStatesAcceptNothing(t *testing.T) {
	t.Parallel()
	for _, s := range States {
		if !s.Terminal() {
			continue
		}
		for _, e := range Events {
			if _, err := Transition(s, e); err == nil {
				t.Errorf("terminal %s accepted %s", s, e)
			}
		}
	}
}

func TestEveryNonTerminalStateCanBeLeft(t *testing.T) {
	t.Parallel()
	for _, s := range States {
		if s.Terminal() {
			continue
		}
		// Every live session must be deletable or become terminal some way.
		n := 0
		for _, e := range Events {
			if _, err := Transition(s, e); err == nil {
				n++
			}
		}
		if n == 0 {
			t.Errorf("state %s is a trap: no event leaves it", s)
		}
	}
}

func TestHasVMMatchesHostLoss(t *testing.T) {
	t.Parallel()
	// A state that may own a VM must react to its host being lost, else a
	// lost host would leave the session stuck.
	for _, s := range States {
		_, err := Transition(s, HeartbeatLost)
		if s.HasVM() && err != nil {
			t.Errorf("%s has a VM but ignores %s", s, HeartbeatLost)
		}
		if !s.HasVM() && err == nil {
			t.Errorf("%s has no VM but accepts %s", s, HeartbeatLost)
		}
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	for _, s := range States {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
	}
	if State("bogus").Valid() {
		t.Error("bogus state valid")
	}
}
