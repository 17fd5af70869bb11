package hoststate

import (
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
)

// Event is something that happened to a host that may move its state.
type Event string

// Host events, named for what happened rather than for the state they lead
// to. Where a host's drain flag (admin intent) decides the state, the event
// says which it is.
const (
	// Registered: its agent registered over a link; its drain flag is clear.
	Registered Event = "registered"
	// RegisteredDraining: its agent registered over a link; its drain flag
	// is set.
	RegisteredDraining Event = "registered_draining"
	// Revived: a lost host heartbeated again; its drain flag is clear.
	Revived Event = "revived"
	// RevivedDraining: a lost host heartbeated again; its drain flag is set.
	RevivedDraining Event = "revived_draining"
	// DrainFlagSet: an admin set its drain flag (store.SetHostDraining); a
	// connected host stops taking sessions, a new or lost one waits for its
	// return.
	DrainFlagSet Event = "drain_flag_set"
	// DrainFlagCleared: an admin cleared its drain flag; a connected host
	// takes sessions again.
	DrainFlagCleared Event = "drain_flag_cleared"
	// HeartbeatLost: a connected host sent no heartbeat for HostLostAfter.
	HeartbeatLost Event = "heartbeat_lost"
	// AccessRevoked: it was disabled or deleted, or its token revoked.
	AccessRevoked Event = "access_revoked"
)

// ErrBadTransition is the error of an event a host's state does not allow.
var ErrBadTransition = errors.New("hoststate: bad host transition")

// States lists every host state.
func States() []domain.HostState {
	return []domain.HostState{domain.HostNew, domain.HostReady, domain.HostDraining, domain.HostLost}
}

// Transition is the one rule of host states: the state a host in from
// moves to when ev happens, or from and an error wrapping
// ErrBadTransition. Only a connected host (ready or draining) follows its
// drain flag or is lost; only a lost one is revived.
func Transition(from domain.HostState, ev Event) (domain.HostState, error) {
	connected := map[Event]domain.HostState{
		Registered: domain.HostReady, RegisteredDraining: domain.HostDraining,
		DrainFlagSet: domain.HostDraining, DrainFlagCleared: domain.HostReady,
		HeartbeatLost: domain.HostLost, AccessRevoked: domain.HostLost,
	}
	next, ok := map[domain.HostState]map[Event]domain.HostState{
		domain.HostNew:      {Registered: domain.HostReady, RegisteredDraining: domain.HostDraining},
		domain.HostReady:    connected,
		domain.HostDraining: connected,
		domain.HostLost: {Registered: domain.HostReady, RegisteredDraining: domain.HostDraining,
			Revived: domain.HostReady, RevivedDraining: domain.HostDraining},
	}[from][ev]
	if !ok {
		return from, fmt.Errorf("%w: %s on a %s host", ErrBadTransition, ev, from)
	}
	return next, nil
}
