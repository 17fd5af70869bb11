package hostlink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"
)

// PathEgress is where a host reports what a session's guest tried to reach
// (host to coordinator): POST EgressReport -> 204. Every DNS query the
// machine's filtering resolver answered, every connection its egress
// proxy took and every flow its network's rules dropped is one
// EgressEvent. The coordinator keeps them as the
// session's egress log, fenced like guest-bound reports: only from the host
// the session is placed on, at its current epoch, while it has a VM.
const PathEgress = "/v1/sessions/{id}/egress"

// EgressPath is PathEgress for session sid.
func EgressPath(sid string) string { return strings.Replace(PathEgress, "{id}", sid, 1) }

// Egress event kinds (EgressEvent.Kind).
const (
	EgressDNS     = "dns"     // one query to the machine's resolver
	EgressTCP     = "tcp"     // a connection that was neither TLS nor HTTP, or refused before it said; or a TCP flow the rules dropped (IPv6)
	EgressTLS     = "tls"     // a TLS connection passed through by its SNI
	EgressHTTP    = "http"    // a plain HTTP request (transparent or absolute-form proxy request)
	EgressConnect = "connect" // an HTTP CONNECT tunnel
	EgressUDP     = "udp"     // a UDP flow the machine's rules dropped (any but DNS to its resolver)
	EgressICMP    = "icmp"    // an ICMP or ICMPv6 flow the machine's rules dropped
	EgressIP      = "ip"      // a flow of another IP protocol the machine's rules dropped
	// EgressDropped is no host's kind: the coordinator records events it
	// did not keep (the host's EgressReport.Dropped, and what went over
	// the session's rate) as one event of this kind with their count.
	EgressDropped = "dropped"
)

// Egress verdicts (EgressEvent.Verdict).
const (
	EgressAllow = "allow"
	EgressDeny  = "deny"
)

// Bounds of an EgressReport. The guest chooses the names (a DNS query, an
// SNI, a Host header) and often the reasons quote them, so a host clips
// them (EgressEvent.Clipped) and the coordinator clips them again.
const (
	MaxEgressEvents = 256 // events in one report
	MaxEgressHost   = 253 // bytes of EgressEvent.Host: a DNS name's most
	MaxEgressReason = 256 // bytes of EgressEvent.Reason
	MaxEgressProto  = 16  // bytes of EgressEvent.Proto
	// MaxEgressDropped bounds EgressReport.Dropped (a count since the
	// host's last report).
	MaxEgressDropped = 1 << 40
	// MaxEgressReportBytes bounds one report's JSON: MaxEgressEvents
	// events whose host and reason are escaped at 6 bytes a byte fit.
	MaxEgressReportBytes = 1 << 20
)

// EgressReport is a batch of one session's egress events, oldest first.
type EgressReport struct {
	Epoch  int64         `json:"epoch"`
	Events []EgressEvent `json:"events"`
	// Dropped counts the events the host lost since its last report (its
	// queue was full); the coordinator records them as one EgressDropped
	// event.
	Dropped int64 `json:"dropped,omitempty"`
}

// EgressEvent is one DNS query, connection or dropped flow of a session's
// guest and what the host decided.
type EgressEvent struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"` // Egress{DNS,TCP,TLS,HTTP,Connect,UDP,ICMP,IP}
	// Proto is the transport protocol: tcp, udp, icmp, icmpv6, or
	// another IP protocol's name or number ("" from hosts before it).
	Proto string `json:"proto,omitempty"`
	// Addr is the destination address the guest dialled (an IP literal),
	// whatever name it claimed; "" when unknown.
	Addr string `json:"addr,omitempty"`
	// Host is the name the guest claimed (its query, SNI, Host header or
	// CONNECT target) as it sent it, case kept; the address when it named
	// none.
	Host      string `json:"host,omitempty"`
	Port      uint16 `json:"port,omitempty"`
	Verdict   string `json:"verdict"`              // EgressAllow or EgressDeny
	BytesUp   int64  `json:"bytes_up,omitempty"`   // guest → upstream
	BytesDown int64  `json:"bytes_down,omitempty"` // upstream → guest
	Reason    string `json:"reason,omitempty"`     // why, for people
}

// ErrBadEgressReport is the category of a report DecodeEgressReport refuses.
var ErrBadEgressReport = errors.New("bad egress report")

// HostKind reports whether kind is one a host may send.
func HostKind(kind string) bool {
	switch kind {
	case EgressDNS, EgressTCP, EgressTLS, EgressHTTP, EgressConnect, EgressUDP, EgressICMP, EgressIP:
		return true
	}
	return false
}

// Check says what is wrong with e's kind, verdict, protocol and address,
// nil when nothing.
func (e EgressEvent) Check() error {
	if !HostKind(e.Kind) {
		return fmt.Errorf("kind %.40q: want dns, tcp, tls, http, connect, udp, icmp or ip", e.Kind)
	}
	if e.Verdict != EgressAllow && e.Verdict != EgressDeny {
		return fmt.Errorf("verdict %.40q: want allow or deny", e.Verdict)
	}
	if !protoName(e.Proto) {
		return fmt.Errorf("proto %.40q: want at most %d lower-case letters, digits and '-'", e.Proto, MaxEgressProto)
	}
	if e.Addr != "" {
		if a, err := netip.ParseAddr(e.Addr); err != nil || a.Zone() != "" {
			return fmt.Errorf("addr %.60q: want an IP address", e.Addr)
		}
	}
	return nil
}

// protoName reports whether s is a protocol name a host sends.
func protoName(s string) bool {
	if len(s) > MaxEgressProto {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Clipped is e within the bounds: host and reason valid UTF-8 without NUL
// (which no database stores), cut at MaxEgressHost and MaxEgressReason
// bytes on a character boundary, byte counts not below zero, the address
// in its canonical form ("" if it is none), a protocol that is no name
// "". Other control characters stay: readers show them through a terminal
// filter.
func (e EgressEvent) Clipped() EgressEvent {
	e.Host = clipText(e.Host, MaxEgressHost)
	e.Reason = clipText(e.Reason, MaxEgressReason)
	if !protoName(e.Proto) {
		e.Proto = ""
	}
	if a, err := netip.ParseAddr(e.Addr); err == nil && a.Zone() == "" {
		e.Addr = a.String()
	} else {
		e.Addr = ""
	}
	e.BytesUp, e.BytesDown = max(e.BytesUp, 0), max(e.BytesDown, 0)
	return e
}

// clipText makes s valid UTF-8 without NUL, at most n bytes.
func clipText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// DecodeEgressReport reads one report (at most MaxEgressReportBytes; the
// caller bounds r too) and checks it: at most MaxEgressEvents events, each
// of a kind and verdict a host sends, with a protocol name and an IP
// address (or none), Dropped within 0 and MaxEgressDropped. The events
// come back Clipped. A refusal wraps ErrBadEgressReport.
func DecodeEgressReport(r io.Reader) (EgressReport, error) {
	var rep EgressReport
	dec := json.NewDecoder(io.LimitReader(r, MaxEgressReportBytes+1))
	if err := dec.Decode(&rep); err != nil {
		return EgressReport{}, fmt.Errorf("%w: decode: %v", ErrBadEgressReport, err)
	}
	if dec.InputOffset() > MaxEgressReportBytes {
		return EgressReport{}, fmt.Errorf("%w: over %d bytes", ErrBadEgressReport, MaxEgressReportBytes)
	}
	if len(rep.Events) > MaxEgressEvents {
		return EgressReport{}, fmt.Errorf("%w: %d events, at most %d a report", ErrBadEgressReport, len(rep.Events), MaxEgressEvents)
	}
	if rep.Dropped < 0 || rep.Dropped > MaxEgressDropped {
		return EgressReport{}, fmt.Errorf("%w: dropped %d: want 0 to %d", ErrBadEgressReport, rep.Dropped, int64(MaxEgressDropped))
	}
	for i, e := range rep.Events {
		if err := e.Check(); err != nil {
			return EgressReport{}, fmt.Errorf("%w: events[%d]: %v", ErrBadEgressReport, i, err)
		}
		rep.Events[i] = e.Clipped()
	}
	return rep, nil
}
