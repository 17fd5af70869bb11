package egress

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

func TestSockaddrParsing(t *testing.T) {
	t.Parallel()
	v4 := make([]byte, 16)
	binary.NativeEndian.PutUint16(v4, afInet)
	binary.BigEndian.PutUint16(v4[2:], 8443)
	copy(v4[4:], []byte{93, 184, 216, 34})
	if got, err := sockaddr4(v4); err != nil || got != netip.MustParseAddrPort("93.184.216.34:8443") {
		t.Errorf("sockaddr_in: %v, %v", got, err)
	}
	v6 := make([]byte, 28)
	binary.NativeEndian.PutUint16(v6, afInet6)
	binary.BigEndian.PutUint16(v6[2:], 443)
	a := netip.MustParseAddr("2606:2800:220:1::1").As16()
	copy(v6[8:], a[:])
	if got, err := sockaddr6(v6); err != nil || got != netip.MustParseAddrPort("[2606:2800:220:1::1]:443") {
		t.Errorf("sockaddr_in6: %v, %v", got, err)
	}
	if _, err := sockaddr4(v6); err == nil {
		t.Error("an IPv6 address read as IPv4")
	}
	if _, err := sockaddr6(v4[:8]); err == nil {
		t.Error("a short buffer read as IPv6")
	}
}

// On a connection nothing redirected, the syscall runs for real: it
// finds no NAT entry (ENOENT; ENOPROTOOPT without conntrack), or, where
// conntrack tracks loopback, answers the address really dialled.
// (internal/vmm/vmnet's tests redirect for real in a namespace.)
func TestOriginalDestinationOfAPlainConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := OriginalDestination(s)
	t.Logf("original destination: %v, %v", got, err)
	switch {
	case errors.Is(err, errNotRedirected), errors.Is(err, syscall.ENOPROTOOPT):
	case err != nil:
		t.Errorf("original destination: %v", err)
	case got != ln.Addr().(*net.TCPAddr).AddrPort():
		t.Errorf("original destination %v of a connection to %v", got, ln.Addr())
	}
	if _, err := OriginalDestination(fakeConn{}); err == nil {
		t.Error("a conn without a socket has an original destination")
	}
}

type fakeConn struct{ net.Conn }

func (fakeConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
