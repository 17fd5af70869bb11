package apiv1

import "time"

// RouteEgress reads a session's egress log: every DNS query and connection
// its guest made and what the platform decided. Newest first (?before=SEQ
// for older pages), or with ?after=SEQ oldest first after that seq
// (following the log); ?limit= is 1 to MaxEgressPage (default 100). ->
// EgressList.
const RouteEgress = "GET /v1/sessions/{id}/egress"

// MaxEgressPage is the most events one RouteEgress answer holds.
const MaxEgressPage = 1000

// Egress event kinds and verdicts (EgressEvent.Kind and Verdict).
const (
	EgressDNS     = "dns"     // a query to the session's filtering resolver
	EgressTCP     = "tcp"     // a connection that was neither TLS nor HTTP, or refused before it said
	EgressTLS     = "tls"     // a TLS connection passed through by its SNI
	EgressHTTP    = "http"    // a plain HTTP request
	EgressConnect = "connect" // an HTTP CONNECT tunnel
	EgressDropped = "dropped" // Dropped events were not kept (over the session's rate, or lost by its host)

	EgressAllow = "allow"
	EgressDeny  = "deny"
)

// EgressEvent is one entry of a session's egress log. Host and Reason may
// quote what the guest sent (names it asked for): show them as untrusted
// text.
type EgressEvent struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"` // when it happened
	Kind      string    `json:"kind"`
	Host      string    `json:"host,omitempty"`
	Port      int       `json:"port,omitempty"`
	Verdict   string    `json:"verdict,omitempty"` // "" for kind dropped
	BytesUp   int64     `json:"bytes_up"`          // guest → upstream
	BytesDown int64     `json:"bytes_down"`        // upstream → guest
	Reason    string    `json:"reason,omitempty"`
	Dropped   int64     `json:"dropped,omitempty"` // kind dropped only
}

// EgressList answers RouteEgress. Next is the cursor of the following
// page: for a newest-first read, pass it as before= (0 when the page was
// not full: nothing older is left); for an after= read, pass it as after=
// (the newest seq seen, or the after= asked when nothing is new).
type EgressList struct {
	Events []EgressEvent `json:"events"`
	Next   int64         `json:"next"`
}
