package apiv1

import "time"

// RouteEgress reads a session's egress log: every DNS query, connection
// and dropped flow of its guest and what the platform decided. Newest first (?before=SEQ
// for older pages), or with ?after=SEQ oldest first after that seq
// (following the log); ?limit= is 1 to MaxEgressPage (default 100). ->
// EgressList.
const RouteEgress = "GET /v1/sessions/{id}/egress"

// MaxEgressPage is the most events one RouteEgress answer holds.
const MaxEgressPage = 1000

// Egress event kinds and verdicts (EgressEvent.Kind and Verdict).
const (
	EgressDNS     = "dns"     // a query to the session's filtering resolver
	EgressTCP     = "tcp"     // a connection that was neither TLS nor HTTP, or refused before it said; or a TCP flow the machine's network dropped (IPv6)
	EgressTLS     = "tls"     // a TLS connection passed through by its SNI
	EgressHTTP    = "http"    // a plain HTTP request
	EgressConnect = "connect" // an HTTP CONNECT tunnel
	EgressUDP     = "udp"     // a UDP flow the machine's network dropped (any but DNS)
	EgressICMP    = "icmp"    // an ICMP or ICMPv6 flow the machine's network dropped
	EgressIP      = "ip"      // a flow of another IP protocol the machine's network dropped
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
	Proto     string    `json:"proto,omitempty"`   // tcp, udp, icmp, icmpv6, ...; absent in events recorded before it was
	Addr      string    `json:"addr,omitempty"`    // the destination address the guest dialled, whatever name it claimed
	Host      string    `json:"host,omitempty"`    // the name it claimed (query, SNI, Host, CONNECT target) as sent, case kept
	Port      int       `json:"port,omitempty"`    // the destination port
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
