package hostlink

// PathGuestBound is where a host reports that a stream of a session's guest
// (the guest is hostile: root, maybe prompt-injected) exceeded one of the
// host's bounds and was ended or held back (host to coordinator): POST
// GuestBoundReport -> 204. The coordinator appends it to the session's
// event log as an EventGuestBound event, fenced like harness events: only
// from the host the session is placed on, at its current epoch.
const PathGuestBound = "/v1/sessions/{id}/guest-bound"

// EventGuestBound is the session event type of a GuestBoundReport
// (`engrams session logs` shows it).
const EventGuestBound = "guest_bound"

// MaxGuestBoundMessage bounds GuestBoundReport.Message (bytes).
const MaxGuestBoundMessage = 1 << 10

// GuestBoundReport says which bound a guest stream hit, with the values.
type GuestBoundReport struct {
	Epoch int64  `json:"epoch"`
	Bound string `json:"bound"` // e.g. "harness_event_line", "tunnels"
	Limit int64  `json:"limit"` // the bound's value
	// Got is what the guest sent or asked for, as far as the host read it
	// (a line cut at the bound reads Limit+1).
	Got int64 `json:"got"`
	// Repeated counts the times the bound was hit again since the last
	// report of it (a host reports each bound of a session at most once a
	// minute).
	Repeated int    `json:"repeated,omitempty"`
	Message  string `json:"message"` // what the host did, for people
}
