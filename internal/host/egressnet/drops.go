package egressnet

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/egress"
	"github.com/engrams/engrams/internal/vmm/vmnet"
)

// Dropped flows: the packets a machine's rules drop are read from its
// namespace's drop log and become egress events, one per flow.
const (
	// flowMemory is how long a dropped flow is remembered after its last
	// packet: its later packets (a ping's next echo, a retried datagram)
	// make no event of their own.
	flowMemory = 10 * time.Second
	// maxFlows bounds the flows remembered per machine; past it the
	// oldest-looking are forgotten (a flood of distinct flows is bounded
	// by the events' rate per kind instead).
	maxFlows = 4096
)

// flowKey says which packets are one flow: protocol, addresses and ports
// (for ICMP its type and an echo's identifier).
type flowKey struct {
	proto    uint8
	src, dst netip.Addr
	sport    uint16
	dport    uint16
}

// dropRecorder turns dropped packets into events. Only runDrops calls it.
type dropRecorder struct {
	events *egress.Events
	now    func() time.Time
	flows  map[flowKey]time.Time // last packet of each remembered flow
	swept  time.Time
}

func newDropRecorder(events *egress.Events) *dropRecorder {
	return &dropRecorder{events: events, now: time.Now, flows: map[flowKey]time.Time{}}
}

// packet records d: an event if it starts a flow (or one forgotten), none
// for the link's own housekeeping.
func (r *dropRecorder) packet(d vmnet.Drop) {
	if housekeeping(d) {
		return
	}
	now := r.now()
	key := keyOf(d)
	last, seen := r.flows[key]
	if !seen && len(r.flows) >= maxFlows || now.Sub(r.swept) >= flowMemory {
		r.sweep(now)
	}
	r.flows[key] = now
	if seen && now.Sub(last) < flowMemory {
		return
	}
	r.events.Emit(dropEvent(d, now))
}

// sweep forgets the flows quiet for flowMemory and, if the memory is
// still full, an eighth of it (any: a flood is on), so a flood sweeps once
// per maxFlows/8 new flows, not at each.
func (r *dropRecorder) sweep(now time.Time) {
	r.swept = now
	for k, last := range r.flows {
		if now.Sub(last) >= flowMemory {
			delete(r.flows, k)
		}
	}
	for k := range r.flows {
		if len(r.flows) < maxFlows-maxFlows/8 {
			break
		}
		delete(r.flows, k)
	}
}

func keyOf(d vmnet.Drop) flowKey {
	k := flowKey{proto: d.Proto, src: d.Src, dst: d.Dst, sport: d.SrcPort, dport: d.DstPort}
	switch {
	case d.Target.IsValid(): // solicitations for one address are one flow, whatever their source
		k.src, k.dst = netip.Addr{}, d.Target
	case d.Proto == protoICMP || d.Proto == protoICMPv6:
		k.sport, k.dport = uint16(d.ICMPType), d.ICMPID
	}
	return k
}

// IP protocol numbers and their names in events.
const (
	protoICMP    = 1
	protoTCP     = 6
	protoUDP     = 17
	protoICMPv6  = 58
	protoUDPLite = 136
)

var protoNames = map[uint8]string{1: "icmp", 2: "igmp", 4: "ipip", 6: "tcp", 17: "udp", 33: "dccp", 41: "ipv6", 47: "gre",
	50: "esp", 51: "ah", 58: "icmpv6", 132: "sctp", 136: "udplite"}

func protoName(p uint8) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// housekeeping reports whether d is IPv6 link housekeeping a guest's
// kernel does by itself (router solicitations, multicast listener
// reports, duplicate address detection, neighbour advertisements): it
// names no destination and could reach none. A neighbour solicitation
// from an address is not: it asks for the address the guest wants.
func housekeeping(d vmnet.Drop) bool {
	if d.Proto != protoICMPv6 || d.Fragment {
		return false
	}
	switch d.ICMPType {
	case 130, 131, 132, 133, 134, 136, 137, 143: // MLD, router solicitation and advertisement, neighbour advertisement, redirect, MLDv2
		return true
	case 135: // neighbour solicitation: duplicate address detection comes from ::
		return d.Src.IsUnspecified()
	}
	return false
}

// dropEvent is d as an egress event: what the guest dialled (the address,
// or the address a neighbour solicitation asks for) and why it went
// nowhere.
func dropEvent(d vmnet.Drop, at time.Time) egress.Event {
	ev := egress.Event{Time: at, Kind: egress.KindIP, Proto: protoName(d.Proto), Addr: d.Dst.Unmap().String(), Port: d.DstPort, Verdict: egress.Deny}
	switch d.Proto {
	case protoTCP:
		ev.Kind = egress.KindTCP
	case protoUDP, protoUDPLite:
		ev.Kind = egress.KindUDP
	case protoICMP, protoICMPv6:
		ev.Kind = egress.KindICMP
	}
	switch {
	case d.Target.IsValid():
		ev.Addr = d.Target.String()
		ev.Reason = fmt.Sprintf("IPv6 neighbour solicitation for %s (from %s): the machine has no IPv6; dropped", d.Target, d.Src)
	case d.Dst.Is6() && !d.Dst.Is4In6():
		ev.Reason = fmt.Sprintf("IPv6 %s from %s: the machine has no IPv6; dropped", what(d), d.Src)
	case d.Proto == protoICMP:
		ev.Reason = fmt.Sprintf("ICMP %s: no ICMP leaves the machine; dropped", icmpName(false, d.ICMPType))
	case ev.Kind == egress.KindUDP:
		ev.Reason = fmt.Sprintf("UDP to port %d: only DNS (port 53, to the machine's resolver) leaves the machine; dropped", d.DstPort)
	default:
		ev.Reason = fmt.Sprintf("IP protocol %s: only TCP and DNS leave the machine; dropped", ev.Proto)
	}
	if d.Fragment {
		ev.Reason += " (a fragment after the first: no ports)"
	}
	return ev
}

// what names an IPv6 packet's payload for a reason.
func what(d vmnet.Drop) string {
	if d.Proto == protoICMPv6 {
		return "ICMPv6 " + icmpName(true, d.ICMPType)
	}
	return protoName(d.Proto)
}

// icmpNames name the ICMP (false) and ICMPv6 (true) types a guest sends
// most.
var icmpNames = map[bool]map[uint8]string{
	false: {0: "echo reply", 3: "destination unreachable", 8: "echo request", 13: "timestamp request"},
	true:  {1: "destination unreachable", 128: "echo request", 129: "echo reply"},
}

func icmpName(v6 bool, t uint8) string {
	if n, ok := icmpNames[v6][t]; ok {
		return n
	}
	return "type " + strconv.Itoa(int(t))
}

// dropLog is the part of a vmnet.DropLog runDrops reads.
type dropLog interface {
	Read() ([]vmnet.Drop, int64, error)
	Close() error
}

// runDrops records what the machine's rules drop until ctx ends (which
// closes the log). Packets the kernel could not hand over count as
// dropped events.
func runDrops(ctx context.Context, dl dropLog, rec *dropRecorder) error {
	stop := context.AfterFunc(ctx, func() { _ = dl.Close() })
	defer stop()
	for {
		drops, lost, err := dl.Read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dropped packets: %w", err)
		}
		rec.events.AddDropped(lost)
		for _, d := range drops {
			rec.packet(d)
		}
	}
}

var _ dropLog = (*vmnet.DropLog)(nil)
