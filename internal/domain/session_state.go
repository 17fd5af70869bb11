package domain

// SessionState is where a session is in its life.
type SessionState string

// The user-visible states of DESIGN.md plus the transitional states the
// coordinator needs while an operation is in flight.
const (
	SessionCreated    SessionState = "created"    // row exists, no VM yet
	SessionStarting   SessionState = "starting"   // placed on a host, VM booting
	SessionActive     SessionState = "active"     // guest daemon answers
	SessionSuspending SessionState = "suspending" // snapshot in progress (evict)
	SessionIdle       SessionState = "idle"       // committed snapshot, no VM
	SessionResuming   SessionState = "resuming"   // restoring a snapshot on a host
	SessionDeleting   SessionState = "deleting"   // VM being destroyed
	SessionHostLost   SessionState = "host_lost"  // heartbeats stopped while the session had a VM
	SessionCompleted  SessionState = "completed"  // terminal: deleted
	SessionDead       SessionState = "dead"       // terminal: unrecoverable
)

// SessionStates lists every state, in lifecycle order.
var SessionStates = []SessionState{SessionCreated, SessionStarting, SessionActive, SessionSuspending, SessionIdle, SessionResuming, SessionDeleting, SessionHostLost, SessionCompleted, SessionDead}

// Terminal reports whether no event can move a session out of s.
func (s SessionState) Terminal() bool { return s == SessionCompleted || s == SessionDead }

// VMStates lists the states in which a session may own a VM, in
// SessionStates order.
func VMStates() []SessionState {
	var out []SessionState
	for _, s := range SessionStates {
		if s.HasVM() {
			out = append(out, s)
		}
	}
	return out
}

// HasVM reports whether a session in state s may own a VM on a host.
func (s SessionState) HasVM() bool {
	switch s {
	case SessionStarting, SessionActive, SessionSuspending, SessionResuming, SessionDeleting:
		return true
	}
	return false
}

// MayUseCredentials reports whether a session in state s may use the model
// gateway and the credential broker: its machine exists and may be
// running a harness (booting, running, being captured, or restored before
// the coordinator recorded it); a deleting session may not.
func (s SessionState) MayUseCredentials() bool {
	return s.HasVM() && s != SessionDeleting
}

// Valid reports whether s is a known state.
func (s SessionState) Valid() bool {
	for _, k := range SessionStates {
		if k == s {
			return true
		}
	}
	return false
}
