package hoststate

import (
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/testutil"
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
	testutil.CheckTransitions(t, testutil.Machine[domain.HostState, Event]{States: statesSpec(), Events: eventsSpec(),
		Legal: legal(), Transition: Transition, ErrBad: ErrBadTransition})
}

func TestStatesListsEveryState(t *testing.T) {
	t.Parallel()
	if got := States(); !slices.Equal(got, statesSpec()) {
		t.Errorf("States() = %v, want %v", got, statesSpec())
	}
}
