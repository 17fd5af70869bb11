package vmnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OriginalDst is the address a redirected connection was made to, before
// the namespace's rules sent it to the proxy (SO_ORIGINAL_DST): the
// address and port the guest dialed. c is a connection accepted from a
// Listen listener.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var sa unix.RawSockaddrInet4
	var serr error
	err = raw.Control(func(fd uintptr) {
		l := uint32(unix.SizeofSockaddrInet4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if sa.Family != unix.AF_INET {
		return netip.AddrPort{}, errors.New("original destination: not an IPv4 address")
	}
	port := uint16(sa.Port>>8) | uint16(sa.Port<<8) // network byte order
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
