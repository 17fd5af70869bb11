package domain

import "time"

// EgressEvent is one row of a session's egress log: a DNS query, a
// connection or a dropped flow of its guest and what the host's resolver,
// proxy or network rules decided (kinds and verdicts are hostlink's
// Egress* names), or, of kind "dropped", how many such events were not
// kept.
type EgressEvent struct {
	SessionID SessionID
	Seq       int64     // per session, gap-free in arrival order; the cursor of reads
	At        time.Time // when it happened, by the host's clock
	Kind      string
	Proto     string // tcp, udp, icmp, icmpv6, ...; "" in rows from before it was recorded
	Addr      string // the destination address the guest dialled; "" when unknown
	Host      string // the name the guest claimed, as it sent it
	Port      int
	Verdict   string // "" for kind dropped
	BytesUp   int64  // guest → upstream
	BytesDown int64  // upstream → guest
	Reason    string
	Dropped   int64     // kind dropped only: events not kept
	CreatedAt time.Time // when the coordinator stored it
}
