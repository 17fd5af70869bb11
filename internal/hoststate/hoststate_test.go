package hoststate

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// statesSpec and eventsSpec are every host state and event, listed here
// apart from the implementation.
func statesSpec() []domain.HostState {
	return []domain.HostState{domain.HostNew, domain.HostReady, domain.HostDraining, domain.HostLost}
}

func eventsSpec() []Event {
	return []Event{Registered, RegisteredDraining, Revived, RevivedDraining, DrainFlagSet, DrainFlagCleared,
		HeartbeatLost, AccessRevoked}
}

// legal is the spec of host states, written apart from Transition's
// table. Every pair not listed must be refused.
func legal() map[domain.HostState]map[Event]domain.HostState {
	connected := func() map[Event]domain.HostState {
		return map[Event]domain.HostState{
			Registered:         domain.HostReady,
			RegisteredDraining: domain.HostDraining,
			DrainFlagSet:       domain.HostDraining,
			DrainFlagCleared:   domain.HostReady,
			HeartbeatLost:      domain.HostLost,
			AccessRevoked:      domain.HostLost,
		}
	}
	return map[domain.HostState]map[Event]domain.HostState{
		domain.HostNew: {
			Registered:         domain.HostReady,
			RegisteredDraining: domain.HostDraining,
		},
		domain.HostReady:    connected(),
		domain.HostDraining: connected(),
		domain.HostLost: {
			Registered:         domain.HostReady,
			RegisteredDraining: domain.HostDraining,
			Revived:            domain.HostReady,
			RevivedDraining:    domain.HostDraining,
		},
	}
}

func TestTransitionEveryPair(t *testing.T) {
	t.Parallel()
	spec := legal()
	if len(spec) != len(statesSpec()) {
		t.Fatalf("the spec covers %d states, there are %d", len(spec), len(statesSpec()))
	}
	for _, s := range statesSpec() {
		for _, ev := range eventsSpec() {
			t.Run(fmt.Sprintf("%s/%s", s, ev), func(t *testing.T) {
				t.Parallel()
				got, err := Transition(s, ev)
				want, ok := spec[s][ev]
				switch {
				case ok && err != nil:
					t.Fatalf("Transition(%s, %s) refused: %v; want %s", s, ev, err, want)
				case ok && got != want:
					t.Fatalf("Transition(%s, %s) = %s, want %s", s, ev, got, want)
				case !ok && !errors.Is(err, ErrBadTransition):
					t.Fatalf("Transition(%s, %s) = %s, %v; want ErrBadTransition", s, ev, got, err)
				case !ok && got != s:
					t.Fatalf("refused Transition(%s, %s) moved the host to %s", s, ev, got)
				}
			})
		}
	}
}

func TestStatesListsEveryState(t *testing.T) {
	t.Parallel()
	if got := States(); !slices.Equal(got, statesSpec()) {
		t.Errorf("States() = %v, want %v", got, statesSpec())
	}
	for _, ev := range eventsSpec() {
		n := 0
		for _, moves := range legal() {
			if _, ok := moves[ev]; ok {
				n++
			}
		}
		if n == 0 {
			t.Errorf("no host state accepts %s", ev)
		}
	}
}
