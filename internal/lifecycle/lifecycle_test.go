package lifecycle

import (
	"errors"
	"fmt"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// legal is the spec, written independently of the implementation's table:
// one row per state listing the events it accepts. Every pair not listed
// must be refused.
var legal = map[domain.SessionState]map[Event]domain.SessionState{
	domain.SessionCreated: {Place: domain.SessionStarting, Unplaceable: domain.SessionDead, NoRoom: domain.SessionCompleted, DeleteRequested: domain.SessionCompleted, TimeLimit: domain.SessionDead},
	domain.SessionStarting: {Started: domain.SessionActive, StartFailed: domain.SessionDead, Requeue: domain.SessionCreated, DeleteRequested: domain.SessionDeleting,
		HeartbeatLost: domain.SessionHostLost, TimeLimit: domain.SessionDeleting},
	domain.SessionActive: {SuspendRequested: domain.SessionSuspending, DeleteRequested: domain.SessionDeleting,
		HeartbeatLost: domain.SessionHostLost, TimeLimit: domain.SessionDeleting},
	domain.SessionSuspending: {Snapshotted: domain.SessionIdle, SnapshotFailed: domain.SessionActive, DeleteRequested: domain.SessionDeleting,
		HeartbeatLost: domain.SessionHostLost, TimeLimit: domain.SessionDeleting},
	domain.SessionIdle: {ResumeRequested: domain.SessionResuming, DeleteRequested: domain.SessionCompleted, Unrestorable: domain.SessionDead, TimeLimit: domain.SessionDead},
	domain.SessionResuming: {Resumed: domain.SessionActive, ResumeFailed: domain.SessionIdle, Unrestorable: domain.SessionDead, DeleteRequested: domain.SessionDeleting,
		HeartbeatLost: domain.SessionHostLost, TimeLimit: domain.SessionDeleting},
	domain.SessionDeleting:  {Destroyed: domain.SessionCompleted, HeartbeatLost: domain.SessionCompleted, Expired: domain.SessionDead},
	domain.SessionHostLost:  {Recovered: domain.SessionIdle, NotRecoverable: domain.SessionDead, DeleteRequested: domain.SessionCompleted, TimeLimit: domain.SessionDead},
	domain.SessionCompleted: {},
	domain.SessionDead:      {},
}

func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	if len(legal) != len(domain.SessionStates) {
		t.Fatalf("spec covers %d states, package has %d", len(legal), len(domain.SessionStates))
	}
	for _, s := range domain.SessionStates {
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
	for _, s := range domain.SessionStates {
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
	for _, s := range domain.SessionStates {
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
	for _, s := range domain.SessionStates {
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
	for _, s := range domain.SessionStates {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
	}
	if domain.SessionState("bogus").Valid() {
		t.Error("bogus state valid")
	}
}
