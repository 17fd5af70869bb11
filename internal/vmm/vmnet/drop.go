package vmnet

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/mdlayher/netlink"
)

// Drop is one packet a machine's rules dropped, as its headers say. The
// guest wrote them: they are decoded within the bytes the kernel copied
// (dropSnaplen), trusting no length they claim.
type Drop struct {
	// Proto is the IP protocol (after IPv6's extension headers): 1 ICMP,
	// 6 TCP, 17 UDP, 58 ICMPv6, ...
	Proto    uint8
	Src, Dst netip.Addr
	// SrcPort and DstPort are TCP's, UDP's, UDP-Lite's, SCTP's or DCCP's;
	// 0 for other protocols and for a fragment after the first.
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are ICMP's or ICMPv6's; ICMPID an echo's
	// identifier (a ping's flow).
	ICMPType, ICMPCode uint8
	ICMPID             uint16
	// Target is what an ICMPv6 neighbour solicitation asks for: the
	// address the guest is trying to reach on its link.
	Target netip.Addr
	// Fragment: a fragment after the first, without a transport header.
	Fragment bool
}

// IP protocol numbers Drop decodes.
const (
	protoICMPv4  = 1
	protoTCPv4   = 6
	protoUDPv4   = 17
	protoDCCP    = 33
	protoICMPv6  = 58
	protoSCTP    = 132
	protoUDPLite = 136
)

// IPv6 extension headers walked to the transport header.
const (
	ext6HopByHop = 0
	ext6Routing  = 43
	ext6Fragment = 44
	ext6AH       = 51
	ext6DestOpts = 60
	// maxExt6 bounds the extension headers walked; a packet with more
	// is decoded without its transport header.
	maxExt6 = 8
)

// ICMPv6 types Drop looks into.
const (
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129
	icmp6NeighSolicit = 135
	icmp4EchoReply    = 0
	icmp4EchoRequest  = 8
)

// decodePacket decodes an IPv4 or IPv6 packet's headers (b starts at the
// network header). ok is false for anything that is not one.
func decodePacket(b []byte) (d Drop, ok bool) {
	if len(b) == 0 {
		return Drop{}, false
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		l4, ok = decodeIPv4(b, &d)
	case 6:
		l4, ok = decodeIPv6(b, &d)
	}
	if !ok {
		return Drop{}, false
	}
	if !d.Fragment {
		decodeTransport(l4, &d)
	}
	return d, true
}

// decodeIPv4 fills d from an IPv4 header and returns the transport bytes.
func decodeIPv4(b []byte, d *Drop) ([]byte, bool) {
	if len(b) < 20 {
		return nil, false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || ihl > len(b) {
		return nil, false
	}
	d.Proto = b[9]
	d.Src, d.Dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	d.Fragment = binary.BigEndian.Uint16(b[6:8])&0x1fff != 0
	end := len(b)
	if total := int(binary.BigEndian.Uint16(b[2:4])); total >= ihl && total < end {
		end = total // trailing bytes past the packet are no part of it
	}
	return b[ihl:end], true
}

// decodeIPv6 fills d from an IPv6 header and its extension headers (at
// most maxExt6) and returns the transport bytes (none when the chain does
// not end within b).
func decodeIPv6(b []byte, d *Drop) ([]byte, bool) {
	if len(b) < 40 {
		return nil, false
	}
	d.Src, d.Dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
	end := len(b)
	if total := 40 + int(binary.BigEndian.Uint16(b[4:6])); total < end {
		end = total
	}
	next, off := b[6], 40
	for range maxExt6 {
		var n int
		switch next {
		case ext6HopByHop, ext6Routing, ext6DestOpts:
			if off+2 > end {
				d.Proto = next
				return nil, true
			}
			n = (int(b[off+1]) + 1) * 8
		case ext6Fragment:
			if off+8 > end {
				d.Proto = next
				return nil, true
			}
			n = 8
			d.Fragment = d.Fragment || binary.BigEndian.Uint16(b[off+2:off+4])>>3 != 0
		case ext6AH:
			if off+2 > end {
				d.Proto = next
				return nil, true
			}
			n = (int(b[off+1]) + 2) * 4
		default:
			d.Proto = next
			return b[off:end], true
		}
		if off+n > end {
			d.Proto = next
			return nil, true
		}
		next, off = b[off], off+n
	}
	d.Proto = next
	return nil, true
}

// decodeTransport fills d's ports or ICMP fields from the transport
// header's first bytes, as far as they are there.
func decodeTransport(l4 []byte, d *Drop) {
	switch d.Proto {
	case protoTCPv4, protoUDPv4, protoUDPLite, protoSCTP, protoDCCP:
		if len(l4) >= 4 {
			d.SrcPort, d.DstPort = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		}
	case protoICMPv4, protoICMPv6:
		if len(l4) < 2 {
			return
		}
		d.ICMPType, d.ICMPCode = l4[0], l4[1]
		v6 := d.Proto == protoICMPv6 && d.Dst.Is6()
		echo := !v6 && (d.ICMPType == icmp4EchoRequest || d.ICMPType == icmp4EchoReply) ||
			v6 && (d.ICMPType == icmp6EchoRequest || d.ICMPType == icmp6EchoReply)
		if echo && len(l4) >= 8 {
			d.ICMPID = binary.BigEndian.Uint16(l4[4:6])
		}
		if v6 && d.ICMPType == icmp6NeighSolicit && len(l4) >= 24 {
			d.Target = netip.AddrFrom16([16]byte(l4[8:24]))
		}
	}
}

// NFLOG's netlink messages and attributes (linux/netfilter/nfnetlink_log.h).
const (
	nfnlSubsysULOG   = 4
	nfulnlMsgPacket  = nfnlSubsysULOG<<8 | 0
	nfulnlMsgConfig  = nfnlSubsysULOG<<8 | 1
	nfulaPayload     = 9
	nfulaSeq         = 12
	nfgenmsgLen      = 4
	maxLogAttributes = 64 // a packet message has about 15
)

var errNotLogged = errors.New("not a logged packet")

// decodeLogMessage reads a NFLOG packet message's body (after the
// netlink header): the packet's bytes and the instance's sequence
// number, when it carries one.
func decodeLogMessage(data []byte) (payload []byte, seq uint32, hasSeq bool, err error) {
	if len(data) < nfgenmsgLen {
		return nil, 0, false, errNotLogged
	}
	ad, err := netlink.NewAttributeDecoder(data[nfgenmsgLen:])
	if err != nil {
		return nil, 0, false, err
	}
	if ad.Len() > maxLogAttributes {
		return nil, 0, false, errNotLogged
	}
	for ad.Next() {
		switch ad.Type() {
		case nfulaPayload:
			payload = ad.Bytes()
		case nfulaSeq:
			if b := ad.Bytes(); len(b) == 4 {
				seq, hasSeq = binary.BigEndian.Uint32(b), true
			}
		}
	}
	if err := ad.Err(); err != nil {
		return nil, 0, false, err
	}
	if payload == nil {
		return nil, 0, false, errNotLogged
	}
	return payload, seq, hasSeq, nil
}
