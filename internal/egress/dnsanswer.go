package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// DNS message bounds.
const (
	maxQueryBytes = 4096 // a query, over UDP or TCP: larger ones are malformed
	minUDPAnswer  = 512  // without EDNS0
	maxUDPAnswer  = 1232 // with EDNS0, whatever the query offers (no fragments)
	maxTCPAnswer  = 65535
)

// answer is the resolver's reply to one query message (nil: none, for a
// message that is no query). Only a name Names allows, asked for A or
// AAAA, reaches the upstream; the answer holds only the addresses Addrs
// passes. Every query yields one event.
func (d *DNS) answer(ctx context.Context, raw []byte, udp bool) []byte {
	ev := Event{Kind: KindDNS, Proto: "tcp", Verdict: Deny}
	if udp {
		ev.Proto = "udp"
	}
	resp := d.reply(ctx, raw, &ev)
	if resp == nil {
		d.events.Emit(ev)
		return nil
	}
	size := maxTCPAnswer
	if udp {
		size = minUDPAnswer
		if resp.IsEdns0() != nil {
			size = maxUDPAnswer
		}
	}
	resp.Truncate(size)
	out, err := resp.Pack()
	if err != nil {
		ev.Verdict, ev.Reason = Deny, "pack answer: "+err.Error()
		d.events.Emit(ev)
		return nil
	}
	d.events.Emit(ev)
	return out
}

// reply decides the answer to raw and fills in ev.
func (d *DNS) reply(ctx context.Context, raw []byte, ev *Event) *dns.Msg {
	var q dns.Msg
	if err := q.Unpack(raw); err != nil {
		ev.Reason = "malformed query"
		if len(raw) < 12 || raw[2]&0x80 != 0 { // no header, or a response
			return nil
		}
		m := &dns.Msg{}
		m.Id, m.Response, m.Rcode = binary.BigEndian.Uint16(raw), true, dns.RcodeFormatError
		return m
	}
	if q.Response {
		ev.Reason = "a response, not a query"
		return nil
	}
	m := new(dns.Msg).SetReply(&q)
	m.RecursionAvailable = true
	if q.IsEdns0() != nil {
		m.SetEdns0(maxUDPAnswer, false)
	}
	switch {
	case q.Opcode != dns.OpcodeQuery:
		m.Rcode, ev.Reason = dns.RcodeNotImplemented, "opcode "+dns.OpcodeToString[q.Opcode]
		return m
	case len(q.Question) != 1:
		m.Rcode, ev.Reason = dns.RcodeFormatError, fmt.Sprintf("%d questions", len(q.Question))
		return m
	}
	qn := q.Question[0]
	qtype := dns.Type(qn.Qtype).String()
	ev.Host = strings.TrimSuffix(qn.Name, ".") // as sent, case kept
	switch {
	case qn.Qclass != dns.ClassINET:
		m.Rcode, ev.Reason = dns.RcodeRefused, "class "+dns.Class(qn.Qclass).String()
		return m
	case metaType(qn.Qtype):
		m.Rcode, ev.Reason = dns.RcodeRefused, "type "+qtype
		return m
	}
	name, ok := hostName(qn.Name)
	if !ok {
		m.Rcode, ev.Reason = dns.RcodeNameError, qtype+": not a host name"
		return m
	}
	if ok, why := d.names.AllowName(name, AnyPort); !ok {
		m.Rcode, ev.Reason = dns.RcodeNameError, qtype+": "+why
		return m
	}
	if qn.Qtype != dns.TypeA && qn.Qtype != dns.TypeAAAA {
		ev.Verdict, ev.Reason = Allow, qtype+": no data (only A and AAAA are answered)"
		return m
	}
	return d.resolve(ctx, m, qn, name, ev)
}

// resolve asks the upstream for name's addresses of qn's type and
// answers those Addrs passes.
func (d *DNS) resolve(ctx context.Context, m *dns.Msg, qn dns.Question, name string, ev *Event) *dns.Msg {
	network, qtype := "ip4", "A"
	if qn.Qtype == dns.TypeAAAA {
		network, qtype = "ip6", "AAAA"
		if d.cfg.IPv4Only { // the guest could not reach an IPv6 address
			ev.Verdict, ev.Reason = Allow, qtype+": none (the guest's network is IPv4 only)"
			return m
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.UpstreamTimeout)
	defer cancel()
	addrs, err := d.upstream.LookupNetIP(ctx, network, name+".") // rooted: no search domains
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		ev.Verdict, ev.Reason = Allow, qtype+": no such host upstream"
		return m
	case err != nil:
		m.Rcode, ev.Reason = dns.RcodeServerFailure, qtype+": upstream: "+err.Error()
		return m
	}
	hdr := dns.RR_Header{Name: qn.Name, Rrtype: qn.Qtype, Class: dns.ClassINET, Ttl: uint32(d.cfg.TTL.Seconds())}
	seen := map[netip.Addr]bool{}
	blocked := 0
	var why error
	for _, a := range addrs {
		a = a.Unmap()
		if seen[a] || a.Is4() != (network == "ip4") || len(m.Answer) >= d.cfg.MaxAnswers {
			continue
		}
		seen[a] = true
		if err := d.addrs.CheckAddr(netip.AddrPortFrom(a, answerCheckPort)); err != nil {
			blocked++
			why = err
			continue
		}
		if d.present != nil {
			a = d.present(a)
		}
		if a.Is4() {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		} else {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	ev.Verdict, ev.Reason = Allow, fmt.Sprintf("%s: %d addresses", qtype, len(m.Answer))
	if blocked > 0 {
		ev.Reason += fmt.Sprintf(", %d blocked (%v)", blocked, why)
		if len(m.Answer) == 0 {
			ev.Verdict = Deny
		}
	}
	return m
}

// metaType reports the types no resolver answers here: zone transfers,
// ANY, OPT and the other meta-types.
func metaType(t uint16) bool {
	return t == 0 || t == dns.TypeOPT || t == dns.TypeTSIG || t == dns.TypeTKEY || (t >= 128 && t <= 255)
}
