//go:build !linux

package egress

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDestination is only known on Linux.
func OriginalDestination(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: only on Linux")
}
