package lifecycle

import (
	"errors"
	"fmt"
)

// State is where a session is in its life.
type State string

// The user-visible states of DESIGN.md plus the transitional states the
// coordinator needs while an operation is in flight.
const (
	Created    State = "created"    // row exists, no VM yet
	Starting   State = "starting"   // placed on a host, VM booting
	Active     State = "active"     // guest daemon answers
	Suspending State = "suspending" // snapshot in progress (evict)
	Idle       State = "idle"       // committed snapshot, no VM
	Resuming   State = "resuming"   // restoring a snapshot on a host
	Deleting   State = "deleting"   // VM being destroyed
	HostLost   State = "host_lost"  // heartbeats stopped while the session had a VM
	Completed  State = "completed"  // terminal: deleted
	Dead       State = "dead"       // terminal: unrecoverable
)

// States lists every state, in lifecycle order.
var States = []State{Created, Starting, Active, Suspending, Idle, Resuming, Deleting, HostLost, Completed, Dead}

// Terminal reports whether no event can move a session out of s.
func (s State) Terminal() bool { return s == Completed || s == Dead }

// HasVM reports whether a session in state s may own a VM on a host.
func (s State) HasVM() bool {
	switch s {
	case Starting, Active, Suspending, Resuming, Deleting:
		return true
	}
	return false
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	for _, k := range States {
		if k == s {
			return true
		}
	}
	return false
}

// Event is something that happened to a session.
type Event string

// Events, named for what happened rather than for the state they lead to.
const (
	Place            Event = "place"             // a host was chosen, boot begins
	Unplaceable      Event = "unplaceable"       // no host could take it in time
	Started          Event = "started"           // guest daemon (and harness) answered
	StartFailed      Event = "start_failed"      // boot failed
	Requeue          Event = "requeue"           // the host refused before booting (capacity): place again
	SuspendRequested Event = "suspend_requested" // idle timeout or explicit suspend
	Snapshotted      Event = "snapshotted"       // snapshot committed, VM destroyed
	SnapshotFailed   Event = "snapshot_failed"   // snapshot failed, VM still running
	ResumeRequested  Event = "resume_requested"  // input arrived for an Idle session
	Resumed          Event = "resumed"           // restore finished, guest answers
	ResumeFailed     Event = "resume_failed"     // restore failed, retry later from Idle
	Unrestorable     Event = "unrestorable"      // snapshot cannot be restored, ever
	DeleteRequested  Event = "delete_requested"  // user asked to delete
	Destroyed        Event = "destroyed"         // VM gone after a delete
	HeartbeatLost    Event = "heartbeat_lost"    // the session's host stopped heartbeating
	Recovered        Event = "recovered"         // host lost, a committed snapshot exists
	NotRecoverable   Event = "not_recoverable"   // host lost, no committed snapshot
	TimeLimit        Event = "time_limit"        // hard time limit passed
	Expired          Event = "expired"           // the machine of a session past its time limit is gone
)

// Events lists every event.
var Events = []Event{Place, Unplaceable, Started, StartFailed, Requeue, SuspendRequested, Snapshotted, SnapshotFailed,
	ResumeRequested, Resumed, ResumeFailed, Unrestorable, DeleteRequested, Destroyed,
	HeartbeatLost, Recovered, NotRecoverable, TimeLimit, Expired}

// ErrIllegal is returned for an event that is not allowed in a state.
var ErrIllegal = errors.New("illegal transition")

type key struct {
	s State
	e Event
}

// table is the whole state machine. Anything not listed is illegal.
var table = map[key]State{
	{Created, Place}:           Starting,
	{Created, Unplaceable}:     Dead,
	{Created, DeleteRequested}: Completed,
	{Created, TimeLimit}:       Dead,

	{Starting, Started}:         Active,
	{Starting, StartFailed}:     Dead,
	{Starting, Requeue}:         Created,
	{Starting, DeleteRequested}: Deleting,
	{Starting, HeartbeatLost}:   HostLost,
	{Starting, TimeLimit}:       Deleting,

	{Active, SuspendRequested}: Suspending,
	{Active, DeleteRequested}:  Deleting,
	{Active, HeartbeatLost}:    HostLost,
	{Active, TimeLimit}:        Deleting,

	{Suspending, Snapshotted}:     Idle,
	{Suspending, SnapshotFailed}:  Active,
	{Suspending, DeleteRequested}: Deleting,
	{Suspending, HeartbeatLost}:   HostLost,
	{Suspending, TimeLimit}:       Deleting,

	{Idle, ResumeRequested}: Resuming,
	{Idle, DeleteRequested}: Completed,
	{Idle, Unrestorable}:    Dead,
	{Idle, TimeLimit}:       Dead,

	{Resuming, Resumed}:         Active,
	{Resuming, ResumeFailed}:    Idle,
	{Resuming, Unrestorable}:    Dead,
	{Resuming, DeleteRequested}: Deleting,
	{Resuming, HeartbeatLost}:   HostLost,
	{Resuming, TimeLimit}:       Deleting,

	{Deleting, Destroyed}:     Completed,
	{Deleting, Expired}:       Dead,
	{Deleting, HeartbeatLost}: Completed, // the host destroys it when it returns: it no longer owns it

	{HostLost, Recovered}:       Idle,
	{HostLost, NotRecoverable}:  Dead,
	{HostLost, DeleteRequested}: Completed,
	{HostLost, TimeLimit}:       Dead,
}

// Transition returns the state a session in s moves to when e happens, or
// an error wrapping ErrIllegal.
func Transition(s State, e Event) (State, error) {
	next, ok := table[key{s, e}]
	if !ok {
		return s, fmt.Errorf("%w: %s on %s", ErrIllegal, e, s)
	}
	return next, nil
}
