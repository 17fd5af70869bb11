package vmnet

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
)

// ipv6Packet is an IPv6 packet from 2001:db8::2 to dst: next is the first
// header after the fixed one, rest what follows it.
func ipv6Packet(dst netip.Addr, next byte, rest []byte) []byte {
	h := make([]byte, 40, 40+len(rest))
	h[0], h[6], h[7] = 0x60, next, 64
	binary.BigEndian.PutUint16(h[4:], uint16(len(rest)))
	copy(h[8:], netip.MustParseAddr("2001:db8::2").AsSlice())
	copy(h[24:], dst.AsSlice())
	return append(h, rest...)
}

// ext6 is an IPv6 extension header of 8 bytes carrying next.
func ext6(next byte) []byte { return []byte{next, 0, 0, 0, 0, 0, 0, 0} }

// fragment6 is a fragment header at offset off (in 8-byte units).
func fragment6(next byte, off uint16) []byte {
	b := []byte{next, 0, 0, 0, 0, 0, 0, 1}
	binary.BigEndian.PutUint16(b[2:], off<<3)
	return b
}

func ports(src, dst uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, src), dst)
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestDecodePacket(t *testing.T) {
	t.Parallel()
	guest := netip.AddrPortFrom(GuestAddr, 41000)
	v4 := func(frame []byte) []byte { return frame[14:] } // the frame builders add Ethernet
	one := netip.MustParseAddr("1.1.1.1")
	doc := netip.MustParseAddr("2001:db8::1")
	withOptions := v4(udpFrame(guest, netip.MustParseAddrPort("1.2.3.4:123"), nil))
	withOptions = concat(withOptions[:20], []byte{1, 1, 1, 1}, withOptions[20:]) // NOP options: IHL 6
	withOptions[0] = 0x46
	laterFragment := v4(udpFrame(guest, netip.MustParseAddrPort("1.2.3.4:123"), []byte("x")))
	binary.BigEndian.PutUint16(laterFragment[6:], 185) // offset 1480
	ns := concat([]byte{135, 0, 0, 0, 0, 0, 0, 0}, doc.AsSlice())
	tooMany := concat(ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(6), ports(1, 2))
	tests := []struct {
		name string
		pkt  []byte
		want string // "" for not decoded
	}{
		{"UDP to NTP", v4(udpFrame(guest, netip.MustParseAddrPort("1.2.3.4:123"), []byte("ntp"))),
			"proto 17 10.0.2.15:41000 -> 1.2.3.4:123"},
		{"ping", v4(icmpEchoFrame(one)), "proto 1 10.0.2.15:0 -> 1.1.1.1:0 icmp 8/0 id 4660"},
		{"IPv4 options", withOptions, "proto 17 10.0.2.15:41000 -> 1.2.3.4:123"},
		{"a later IPv4 fragment", laterFragment, "proto 17 10.0.2.15:0 -> 1.2.3.4:0 fragment"},
		{"GRE", v4(ipv4Packet(GuestAddr, one, 47, []byte{0, 0, 8, 0})), "proto 47 10.0.2.15:0 -> 1.1.1.1:0"},
		{"transport cut short", v4(ipv4Packet(GuestAddr, one, 17, []byte{1, 2})), "proto 17 10.0.2.15:0 -> 1.1.1.1:0"},
		{"an IPv4 length past the bytes", func() []byte {
			b := v4(udpFrame(guest, netip.MustParseAddrPort("1.2.3.4:53"), nil))
			binary.BigEndian.PutUint16(b[2:], 9000)
			return b
		}(), "proto 17 10.0.2.15:41000 -> 1.2.3.4:53"},
		{"an IPv4 length inside the header", func() []byte {
			b := v4(udpFrame(guest, netip.MustParseAddrPort("1.2.3.4:53"), nil))
			binary.BigEndian.PutUint16(b[2:], 4)
			return b
		}(), "proto 17 10.0.2.15:41000 -> 1.2.3.4:53"},
		{"IPv6 TCP", ipv6Packet(doc, 6, concat(ports(40000, 443), make([]byte, 16))), "proto 6 [2001:db8::2]:40000 -> [2001:db8::1]:443"},
		{"IPv6 UDP after hop-by-hop and a first fragment", ipv6Packet(doc, 0, concat(ext6(44), fragment6(17, 0), ports(5, 443))),
			"proto 17 [2001:db8::2]:5 -> [2001:db8::1]:443"},
		{"a later IPv6 fragment", ipv6Packet(doc, 44, concat(fragment6(17, 2), ports(5, 443))), "proto 17 [2001:db8::2]:0 -> [2001:db8::1]:0 fragment"},
		{"IPv6 ping", ipv6Packet(doc, 58, []byte{128, 0, 0, 0, 0, 7, 0, 1}), "proto 58 [2001:db8::2]:0 -> [2001:db8::1]:0 icmp 128/0 id 7"},
		{"a neighbour solicitation", ipv6Packet(netip.MustParseAddr("ff02::1:ff00:1"), 58, ns),
			"proto 58 [2001:db8::2]:0 -> [ff02::1:ff00:1]:0 icmp 135/0 target 2001:db8::1"},
		{"a neighbour solicitation cut short", ipv6Packet(netip.MustParseAddr("ff02::1:ff00:1"), 58, ns[:20]),
			"proto 58 [2001:db8::2]:0 -> [ff02::1:ff00:1]:0 icmp 135/0"},
		{"more extension headers than walked", ipv6Packet(doc, 60, tooMany), "proto 60 [2001:db8::2]:0 -> [2001:db8::1]:0"},
		{"an extension header past the end", ipv6Packet(doc, 60, []byte{6, 200, 0, 0}), "proto 60 [2001:db8::2]:0 -> [2001:db8::1]:0"},
		{"an IPv6 payload length shorter than sent", func() []byte {
			b := ipv6Packet(doc, 6, ports(1, 443))
			binary.BigEndian.PutUint16(b[4:], 2)
			return b
		}(), "proto 6 [2001:db8::2]:0 -> [2001:db8::1]:0"},
		{"empty", nil, ""},
		{"IPv4 header cut short", v4(icmpEchoFrame(one))[:19], ""},
		{"IHL below 5", append([]byte{0x44}, make([]byte, 30)...), ""},
		{"IHL past the bytes", append([]byte{0x4f}, make([]byte, 30)...), ""},
		{"IPv6 header cut short", ipv6Packet(doc, 6, nil)[:39], ""},
		{"version 5", append([]byte{0x50}, make([]byte, 60)...), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, ok := decodePacket(tt.pkt)
			got := ""
			if ok {
				got = describeDrop(d)
			}
			if got != tt.want {
				t.Errorf("decodePacket = %q, want %q", got, tt.want)
			}
		})
	}
}

func describeDrop(d Drop) string {
	s := fmt.Sprintf("proto %d %s -> %s", d.Proto, netip.AddrPortFrom(d.Src, d.SrcPort), netip.AddrPortFrom(d.Dst, d.DstPort))
	if d.Proto == protoICMPv4 || d.Proto == protoICMPv6 {
		s += fmt.Sprintf(" icmp %d/%d", d.ICMPType, d.ICMPCode)
		if d.ICMPID != 0 {
			s += fmt.Sprintf(" id %d", d.ICMPID)
		}
	}
	if d.Target.IsValid() {
		s += " target " + d.Target.String()
	}
	if d.Fragment {
		s += " fragment"
	}
	return s
}

// logMessage is a NFLOG packet message's body as the kernel writes it:
// nfgenmsg, then the attributes.
func logMessage(t testing.TB, seq *uint32, payload []byte) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Bytes(1, []byte{0x08, 0x00, 0, 0}) // NFULA_PACKET_HDR: hw_protocol, hook
	ae.Uint32(4, 3)                       // NFULA_IFINDEX_INDEV
	if payload != nil {
		ae.Bytes(nfulaPayload, payload)
	}
	if seq != nil {
		ae.Uint32(nfulaSeq, *seq)
	}
	ae.String(10, "") // NFULA_PREFIX
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{2, 0, 0, 1}, b...)
}

func TestDecodeLogMessage(t *testing.T) {
	t.Parallel()
	pkt := icmpEchoFrame(netip.MustParseAddr("1.1.1.1"))[14:]
	seven := uint32(7)
	tests := []struct {
		name    string
		data    []byte
		seq     string // "" for refused
		payload int
	}{
		{"with a sequence number", logMessage(t, &seven, pkt), "7", len(pkt)},
		{"without one", logMessage(t, nil, pkt), "none", len(pkt)},
		{"no payload", logMessage(t, &seven, nil), "", 0},
		{"no nfgenmsg", []byte{2, 0}, "", 0},
		{"an attribute longer than the message", append([]byte{2, 0, 0, 1}, 0xff, 0, 9, 0, 1, 2), "", 0},
		{"a sequence number of the wrong size", func() []byte {
			ae := netlink.NewAttributeEncoder()
			ae.Bytes(nfulaPayload, pkt)
			ae.Bytes(nfulaSeq, []byte{1, 2})
			b, _ := ae.Encode()
			return append([]byte{2, 0, 0, 1}, b...)
		}(), "none", len(pkt)},
		{"more attributes than a packet has", func() []byte {
			ae := netlink.NewAttributeEncoder()
			for range maxLogAttributes {
				ae.Uint32(4, 1)
			}
			ae.Bytes(nfulaPayload, pkt)
			b, _ := ae.Encode()
			return append([]byte{2, 0, 0, 1}, b...)
		}(), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			payload, seq, hasSeq, err := decodeLogMessage(tt.data)
			got := "none"
			switch {
			case err != nil:
				got = ""
			case hasSeq:
				got = fmt.Sprint(seq)
			}
			if got != tt.seq || len(payload) != tt.payload {
				t.Errorf("decodeLogMessage: seq %q, %d payload bytes, %v; want seq %q, %d bytes", got, len(payload), err, tt.seq, tt.payload)
			}
		})
	}
}

// TestDropLogGap: gaps in the log's sequence numbers are the packets it
// lost; a first number, or one behind (a wrap back), counts none.
func TestDropLogGap(t *testing.T) {
	t.Parallel()
	type step struct {
		seq  uint32
		lost int64
	}
	for _, steps := range [][]step{
		{{41, 0}, {42, 0}, {45, 2}, {46, 0}, {44, 0}, {45, 0}, {50, 4}},
		{{1<<32 - 2, 0}, {1<<32 - 1, 0}, {1, 1}, {2, 0}}, // through the wrap
	} {
		var l DropLog
		for _, st := range steps {
			if got := l.gap(st.seq); got != st.lost {
				t.Errorf("%v: at %d lost %d, want %d", steps, st.seq, got, st.lost)
			}
		}
	}
}

// FuzzDecodeDrop feeds the drop log's decoders what a hostile guest
// controls (the packet) inside what the kernel frames: whatever they
// take is within its bytes and consistent.
func FuzzDecodeDrop(f *testing.F) {
	seq := uint32(1)
	for _, p := range [][]byte{
		icmpEchoFrame(netip.MustParseAddr("1.1.1.1"))[14:],
		udpFrame(netip.AddrPortFrom(GuestAddr, 1), netip.MustParseAddrPort("1.2.3.4:123"), nil)[14:],
		ipv6Packet(netip.MustParseAddr("2001:db8::1"), 0, concat(ext6(44), fragment6(17, 0), ports(5, 443))),
		ipv6Packet(netip.MustParseAddr("ff02::1:ff00:1"), 58, concat([]byte{135, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 16))),
	} {
		f.Add(p)
		f.Add(logMessage(f, &seq, p))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(pkt []byte) {
			d, ok := decodePacket(pkt)
			if !ok {
				return
			}
			if !d.Src.IsValid() || d.Src.Is4() != d.Dst.Is4() || d.Src.Is4() != (pkt[0]>>4 == 4) {
				t.Fatalf("addresses %v -> %v from a version %d packet", d.Src, d.Dst, pkt[0]>>4)
			}
			if (d.Fragment || d.Proto == protoICMPv4 || d.Proto == protoICMPv6) && (d.SrcPort != 0 || d.DstPort != 0) {
				t.Fatalf("ports %d, %d on %+v", d.SrcPort, d.DstPort, d)
			}
			if d.Target.IsValid() && (d.Proto != protoICMPv6 || d.ICMPType != icmp6NeighSolicit) {
				t.Fatalf("a target on %+v", d)
			}
		}
		check(b)
		if payload, _, _, err := decodeLogMessage(b); err == nil {
			check(payload)
		}
	})
}

// TestDropsAreLogged: every packet the rules drop (ICMP, UDP but DNS,
// other IPv4 protocols, IPv6 of any kind) reaches the drop log with its
// headers; what they let through (TCP, DNS) does not. A second log of the
// same namespace is refused; closing the log ends a Read.
func TestDropsAreLogged(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	dl, err := n.Drops()
	if err != nil {
		t.Fatalf("open the drop log: %v", err)
	}
	got := make(chan Drop, 64)
	done := make(chan error, 1)
	go func() {
		for {
			drops, _, err := dl.Read()
			if err != nil {
				done <- err
				return
			}
			for _, d := range drops {
				got <- d
			}
		}
	}()
	if _, err := n.Drops(); err == nil {
		t.Error("a second drop log of the namespace was opened")
	}
	resolver := listenPacket(t, n, n.ResolverAddr().String())
	proxy := listen(t, n, n.ProxyAddr().String())
	p := newPeer(t, n.TapFile())
	src := netip.AddrPortFrom(GuestAddr, 41000)
	doc := netip.MustParseAddr("2001:db8::1")
	ns := concat([]byte{135, 0, 0, 0, 0, 0, 0, 0}, doc.AsSlice())
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"ping", icmpEchoFrame(netip.MustParseAddr("1.1.1.1")), "proto 1 10.0.2.15:0 -> 1.1.1.1:0 icmp 8/0 id 4660"},
		{"NTP", udpFrame(src, netip.MustParseAddrPort("1.2.3.4:123"), []byte("ntp")), "proto 17 10.0.2.15:41000 -> 1.2.3.4:123"},
		{"QUIC", udpFrame(src, netip.MustParseAddrPort("1.2.3.4:443"), []byte("quic")), "proto 17 10.0.2.15:41000 -> 1.2.3.4:443"},
		{"GRE", ipv4Packet(GuestAddr, netip.MustParseAddr("1.2.3.4"), 47, []byte{0, 0, 8, 0}), "proto 47 10.0.2.15:0 -> 1.2.3.4:0"},
		{"TCP over IPv6", ipv6TCPFrame(netip.AddrPortFrom(doc, 443)), "proto 6 [2001:db8::2]:40000 -> [2001:db8::1]:443"},
		{"UDP over IPv6", eth(etherIPv6, ipv6Packet(doc, 17, concat(ports(5353, 123), []byte{0, 8, 0, 0}))), "proto 17 [2001:db8::2]:5353 -> [2001:db8::1]:123"},
		{"neighbour solicitation", eth(etherIPv6, ipv6Packet(netip.MustParseAddr("ff02::1:ff00:1"), 58, ns)),
			"proto 58 [2001:db8::2]:0 -> [ff02::1:ff00:1]:0 icmp 135/0 target 2001:db8::1"},
	} {
		p.write(tc.frame)
		select {
		case d := <-got:
			if s := describeDrop(d); s != tc.want {
				t.Errorf("%s: logged %q, want %q", tc.name, s, tc.want)
			}
		case <-time.After(wait):
			t.Fatalf("%s: nothing logged", tc.name)
		}
	}
	// Allowed traffic is not logged: DNS to the resolver, a TCP connection.
	barrier(t, p, resolver, 1)
	c := connect(t, p, proxy, 41001, netip.MustParseAddrPort("1.2.3.4:443"))
	c.Close()
	barrier(t, p, resolver, 2)
	select {
	case d := <-got:
		t.Errorf("allowed traffic was logged: %s", describeDrop(d))
	case <-time.After(300 * time.Millisecond):
	}
	dl.Close()
	if err := <-done; err == nil {
		t.Error("Read after Close returned no error")
	}
}
