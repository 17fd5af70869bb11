package hostlink

import "github.com/engrams/engrams/internal/guestapi"

// PathHarnessEvents is where a host relays what a session's harness adapter
// produced (host to coordinator): POST HarnessEventsRequest ->
// HarnessEventsResponse.
const PathHarnessEvents = "/v1/sessions/{id}/harness-events"

// HarnessEventsRequest carries a batch of a session's harness events, in
// guest seq order, from the host its machine runs on. No events: the host
// only asks for the cursor.
type HarnessEventsRequest struct {
	Epoch int64 `json:"epoch"`
	// RewoundTo is set when the guest's event log ends below the cursor
	// the host asked from (the guest was restored to an older state): the
	// coordinator lowers the session's cursor to it first.
	RewoundTo *int64                  `json:"rewound_to,omitempty"`
	Events    []guestapi.HarnessEvent `json:"events,omitempty"`
}

// HarnessEventsResponse answers with the session's cursor: the last guest
// seq its task has taken; the host streams from there.
type HarnessEventsResponse struct {
	Cursor int64 `json:"cursor"`
}
