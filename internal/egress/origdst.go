package egress

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

var errNotRedirected = errors.New("the connection has no original destination")

// sockaddr4 parses a struct sockaddr_in as SO_ORIGINAL_DST returns it
// (family in host order, then port and address in network order).
func sockaddr4(b []byte) (netip.AddrPort, error) {
	if len(b) < 8 || binary.NativeEndian.Uint16(b) != afInet {
		return netip.AddrPort{}, errors.New("original destination: not an IPv4 socket address")
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
}

// sockaddr6 parses a struct sockaddr_in6 (family, port, flow info, then
// the address).
func sockaddr6(b []byte) (netip.AddrPort, error) {
	if len(b) < 24 || binary.NativeEndian.Uint16(b) != afInet6 {
		return netip.AddrPort{}, errors.New("original destination: not an IPv6 socket address")
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4])), nil
}

// Address families (Linux's values).
const (
	afInet  = 2
	afInet6 = 10
)
