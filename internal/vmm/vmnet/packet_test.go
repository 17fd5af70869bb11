package vmnet

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"
	"time"
)

// A hand-made guest: it writes Ethernet frames into the TAP as a guest NIC
// would and reads what the namespace sends back, answering ARP for
// GuestAddr on its own.

const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
	etherIPv6 = 0x86dd
	protoICMP = 1
	protoTCP  = 6
	protoUDP  = 17
	tcpSYN    = 0x02
	tcpRST    = 0x04
	tcpACK    = 0x10
)

// frame is what the peer parsed from one frame the namespace sent.
type frame struct {
	etherType uint16
	proto     byte
	src, dst  netip.AddrPort
	flags     byte
	seq, ack  uint32
	payload   []byte
	icmpType  byte
	arpFor    netip.Addr // an ARP request: whom it asks for
}

type peer struct {
	t      *testing.T
	tap    *os.File
	frames chan frame
	flows  map[uint16]bool // guest ports of the TCP connections made
}

func newPeer(t *testing.T, tap *os.File) *peer {
	p := &peer{t: t, tap: tap, frames: make(chan frame, 64), flows: map[uint16]bool{}}
	go p.read()
	return p
}

func (p *peer) read() {
	buf := make([]byte, 65536)
	for {
		n, err := p.tap.Read(buf)
		if err != nil {
			close(p.frames)
			return
		}
		f, ok := parseFrame(append([]byte(nil), buf[:n]...)) // frames outlive the buffer
		if !ok {
			continue
		}
		if f.etherType == etherARP && f.arpFor == GuestAddr {
			p.write(arpReply())
			continue
		}
		p.frames <- f
	}
}

func (p *peer) write(b []byte) {
	if _, err := p.tap.Write(b); err != nil {
		p.t.Errorf("write to tap: %v", err)
	}
}

// next returns the next IP frame, or fails the test after d.
func (p *peer) next(d time.Duration) frame {
	p.t.Helper()
	select {
	case f, ok := <-p.frames:
		if !ok {
			p.t.Fatal("tap closed")
		}
		return f
	case <-time.After(d):
		p.t.Fatalf("no frame from the namespace in %v", d)
	}
	return frame{}
}

func eth(etherType uint16, payload []byte) []byte {
	b := append(append([]byte{}, HostMAC...), GuestMAC...)
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, payload...)
}

func arpReply() []byte {
	b := []byte{0, 1, 8, 0, 6, 4, 0, 2} // Ethernet, IPv4, reply
	b = append(append(b, GuestMAC...), GuestAddr.AsSlice()...)
	b = append(append(b, HostMAC...), HostAddr.AsSlice()...)
	return eth(etherARP, b)
}

func checksum(parts ...[]byte) uint16 {
	var sum uint32
	for _, b := range parts {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func ipv4Packet(src, dst netip.Addr, proto byte, l4 []byte) []byte {
	h := make([]byte, 20)
	h[0], h[8], h[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(h[10:], checksum(h))
	return eth(etherIPv4, append(h, l4...))
}

func pseudo(src, dst netip.Addr, proto byte, n int) []byte {
	b := append(append([]byte{}, src.AsSlice()...), dst.AsSlice()...)
	b = append(b, 0, proto)
	return binary.BigEndian.AppendUint16(b, uint16(n))
}

func udpFrame(src, dst netip.AddrPort, data []byte) []byte {
	u := make([]byte, 8, 8+len(data))
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(data)))
	u = append(u, data...)
	binary.BigEndian.PutUint16(u[6:], checksum(pseudo(src.Addr(), dst.Addr(), protoUDP, len(u)), u))
	return ipv4Packet(src.Addr(), dst.Addr(), protoUDP, u)
}

func tcpFrame(src, dst netip.AddrPort, seq, ack uint32, flags byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], src.Port())
	binary.BigEndian.PutUint16(h[2:], dst.Port())
	binary.BigEndian.PutUint32(h[4:], seq)
	binary.BigEndian.PutUint32(h[8:], ack)
	h[12], h[13] = 5<<4, flags
	binary.BigEndian.PutUint16(h[14:], 65535)
	binary.BigEndian.PutUint16(h[16:], checksum(pseudo(src.Addr(), dst.Addr(), protoTCP, len(h)), h))
	return ipv4Packet(src.Addr(), dst.Addr(), protoTCP, h)
}

func icmpEchoFrame(dst netip.Addr) []byte {
	m := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'p', 'i', 'n', 'g'}
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return ipv4Packet(GuestAddr, dst, protoICMP, m)
}

// ipv6TCPFrame is a TCP SYN over IPv6 (checksum left zero: it must be
// dropped before anything looks).
func ipv6TCPFrame(dst netip.AddrPort) []byte {
	h := make([]byte, 40)
	h[0], h[6], h[7] = 0x60, protoTCP, 64
	binary.BigEndian.PutUint16(h[4:], 20)
	copy(h[8:], netip.MustParseAddr("2001:db8::2").AsSlice())
	copy(h[24:], dst.Addr().AsSlice())
	t := make([]byte, 20)
	binary.BigEndian.PutUint16(t[0:], 40000)
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	t[12], t[13] = 5<<4, tcpSYN
	return eth(etherIPv6, append(h, t...))
}

func parseFrame(b []byte) (frame, bool) {
	if len(b) < 14 {
		return frame{}, false
	}
	f := frame{etherType: binary.BigEndian.Uint16(b[12:])}
	b = b[14:]
	switch f.etherType {
	case etherARP:
		if len(b) < 28 || binary.BigEndian.Uint16(b[6:]) != 1 {
			return frame{}, false
		}
		f.arpFor = netip.AddrFrom4([4]byte(b[24:28]))
		return f, true
	case etherIPv4:
	default:
		return f, true
	}
	if len(b) < 20 {
		return frame{}, false
	}
	ihl := int(b[0]&0x0f) * 4
	f.proto = b[9]
	src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	l4 := b[ihl:]
	switch f.proto {
	case protoTCP, protoUDP:
		if len(l4) < 8 {
			return frame{}, false
		}
		f.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:]))
		f.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
		if f.proto == protoUDP {
			f.payload = l4[8:]
		} else if len(l4) >= 20 {
			f.seq, f.ack, f.flags = binary.BigEndian.Uint32(l4[4:]), binary.BigEndian.Uint32(l4[8:]), l4[13]
		}
	case protoICMP:
		f.src, f.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		if len(l4) > 0 {
			f.icmpType = l4[0]
		}
	}
	return f, true
}
