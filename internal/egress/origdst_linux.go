package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h).
const ip6tSOOriginalDst = 80

// OriginalDestination is the address a connection redirected by the
// namespace's nftables rules was made to (SO_ORIGINAL_DST): what the
// guest dialled. It satisfies OriginalDst.
func OriginalDestination(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	v6 := false
	if la, ok := c.LocalAddr().(*net.TCPAddr); ok {
		v6 = !la.AddrPort().Addr().Unmap().Is4()
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if v6 {
			// sockaddr_in6 (28 bytes) fits IPv6MTUInfo's leading RawSockaddrInet6.
			var info *unix.IPv6MTUInfo
			if info, serr = unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst); serr == nil {
				b := make([]byte, 28)
				binary.NativeEndian.PutUint16(b, info.Addr.Family)
				binary.NativeEndian.PutUint16(b[2:], info.Addr.Port) // already in network order in memory
				copy(b[8:24], info.Addr.Addr[:])
				ap, serr = sockaddr6(b)
			}
			return
		}
		// sockaddr_in (16 bytes) fits IPv6Mreq's leading 16-byte array.
		var mreq *unix.IPv6Mreq
		if mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST); serr == nil {
			ap, serr = sockaddr4(mreq.Multiaddr[:])
		}
	})
	if err == nil {
		err = serr
	}
	if errors.Is(err, unix.ENOENT) {
		err = errNotRedirected
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, nil
}
