package lifecycle

import (
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
)

// Event is something that happened to a session.
type Event string

// Events, named for what happened rather than for the state they lead to.
const (
	Place            Event = "place"             // a host was chosen, boot begins
	Unplaceable      Event = "unplaceable"       // no host could ever take it (none compatible, all too small)
	NoRoom           Event = "no_room"           // hosts could take it but none had room in time: refused, never started
	Started          Event = "started"           // guest daemon (and harness) answered
	StartFailed      Event = "start_failed"      // boot failed
	Requeue          Event = "requeue"           // the host refused before booting (capacity): place again
	SuspendRequested Event = "suspend_requested" // idle timeout or explicit suspend
	Snapshotted      Event = "snapshotted"       // snapshot committed, VM destroyed
	SnapshotFailed   Event = "snapshot_failed"   // snapshot failed, VM still running
	ResumeRequested  Event = "resume_requested"  // input arrived for an domain.SessionIdle session
	Resumed          Event = "resumed"           // restore finished, guest answers
	ResumeFailed     Event = "resume_failed"     // restore failed, retry later from domain.SessionIdle
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
var Events = []Event{Place, Unplaceable, NoRoom, Started, StartFailed, Requeue, SuspendRequested, Snapshotted, SnapshotFailed,
	ResumeRequested, Resumed, ResumeFailed, Unrestorable, DeleteRequested, Destroyed,
	HeartbeatLost, Recovered, NotRecoverable, TimeLimit, Expired}

// ErrIllegal is returned for an event that is not allowed in a state.
var ErrIllegal = errors.New("illegal transition")

type key struct {
	s domain.SessionState
	e Event
}

// table is the whole state machine. Anything not listed is illegal.
var table = map[key]domain.SessionState{
	{domain.SessionCreated, Place}:           domain.SessionStarting,
	{domain.SessionCreated, Unplaceable}:     domain.SessionDead,
	{domain.SessionCreated, NoRoom}:          domain.SessionCompleted, // like a delete before it started: nothing to recover
	{domain.SessionCreated, DeleteRequested}: domain.SessionCompleted,
	{domain.SessionCreated, TimeLimit}:       domain.SessionDead,

	{domain.SessionStarting, Started}:         domain.SessionActive,
	{domain.SessionStarting, StartFailed}:     domain.SessionDead,
	{domain.SessionStarting, Requeue}:         domain.SessionCreated,
	{domain.SessionStarting, DeleteRequested}: domain.SessionDeleting,
	{domain.SessionStarting, HeartbeatLost}:   domain.SessionHostLost,
	{domain.SessionStarting, TimeLimit}:       domain.SessionDeleting,

	{domain.SessionActive, SuspendRequested}: domain.SessionSuspending,
	{domain.SessionActive, DeleteRequested}:  domain.SessionDeleting,
	{domain.SessionActive, HeartbeatLost}:    domain.SessionHostLost,
	{domain.SessionActive, TimeLimit}:        domain.SessionDeleting,

	{domain.SessionSuspending, Snapshotted}:     domain.SessionIdle,
	{domain.SessionSuspending, SnapshotFailed}:  domain.SessionActive,
	{domain.SessionSuspending, DeleteRequested}: domain.SessionDeleting,
	{domain.SessionSuspending, HeartbeatLost}:   domain.SessionHostLost,
	{domain.SessionSuspending, TimeLimit}:       domain.SessionDeleting,

	{domain.SessionIdle, ResumeRequested}: domain.SessionResuming,
	{domain.SessionIdle, DeleteRequested}: domain.SessionCompleted,
	{domain.SessionIdle, Unrestorable}:    domain.SessionDead,
	{domain.SessionIdle, TimeLimit}:       domain.SessionDead,

	{domain.SessionResuming, Resumed}:         domain.SessionActive,
	{domain.SessionResuming, ResumeFailed}:    domain.SessionIdle,
	{domain.SessionResuming, Unrestorable}:    domain.SessionDead,
	{domain.SessionResuming, DeleteRequested}: domain.SessionDeleting,
	{domain.SessionResuming, HeartbeatLost}:   domain.SessionHostLost,
	{domain.SessionResuming, TimeLimit}:       domain.SessionDeleting,

	{domain.SessionDeleting, Destroyed}:     domain.SessionCompleted,
	{domain.SessionDeleting, Expired}:       domain.SessionDead,
	{domain.SessionDeleting, HeartbeatLost}: domain.SessionCompleted, // the host destroys it when it returns: it no longer owns it

	{domain.SessionHostLost, Recovered}:       domain.SessionIdle,
	{domain.SessionHostLost, NotRecoverable}:  domain.SessionDead,
	{domain.SessionHostLost, DeleteRequested}: domain.SessionCompleted,
	{domain.SessionHostLost, TimeLimit}:       domain.SessionDead,
}

// Transition returns the state a session in s moves to when e happens, or
// an error wrapping ErrIllegal.
func Transition(s domain.SessionState, e Event) (domain.SessionState, error) {
	next, ok := table[key{s, e}]
	if !ok {
		return s, fmt.Errorf("%w: %s on %s", ErrIllegal, e, s)
	}
	return next, nil
}
