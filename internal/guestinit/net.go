package guestinit

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// SetupNetwork brings lo up and, when addr is set and eth0 exists, gives
// eth0 the address and a default route via gw.
func SetupNetwork(addr, gw string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("setup network: socket: %w", err)
	}
	defer unix.Close(fd)
	if err := ifUp(fd, "lo"); err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	if addr == "" {
		return nil
	}
	if !waitFor("/sys/class/net/eth0", time.Second) {
		return nil // no NIC: fine, the channel is virtio-serial
	}
	pfx, err := netip.ParsePrefix(addr)
	if err != nil || !pfx.Addr().Is4() {
		return fmt.Errorf("setup network: bad address %q", addr)
	}
	ifr, err := unix.NewIfreq("eth0")
	if err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	if err := ifr.SetInet4Addr(pfx.Addr().AsSlice()); err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("setup network: set eth0 address: %w", err)
	}
	mask := net.CIDRMask(pfx.Bits(), 32)
	if err := ifr.SetInet4Addr(mask); err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("setup network: set eth0 netmask: %w", err)
	}
	if err := ifUp(fd, "eth0"); err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	if gw == "" {
		return nil
	}
	g, err := netip.ParseAddr(gw)
	if err != nil || !g.Is4() {
		return fmt.Errorf("setup network: bad gateway %q", gw)
	}
	if err := addDefaultRoute(g, "eth0"); err != nil {
		return fmt.Errorf("setup network: %w", err)
	}
	return nil
}

func ifUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get %s flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	return nil
}

// addDefaultRoute sends one RTM_NEWROUTE over rtnetlink.
func addDefaultRoute(gw netip.Addr, dev string) error {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return fmt.Errorf("add default route: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("add default route: %w", err)
	}
	defer unix.Close(fd)
	rt := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0}
	attrs := append(rtattr(unix.RTA_GATEWAY, gw.AsSlice()), rtattr(unix.RTA_OIF, u32(uint32(ifi.Index)))...)
	body := append(rt, attrs...)
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	msg = append(msg, body...)
	h := (*unix.NlMsghdr)(nlPtr(msg))
	h.Len = uint32(len(msg))
	h.Type = unix.RTM_NEWROUTE
	h.Flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL
	h.Seq = 1
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("add default route: send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("add default route: recv: %w", err)
	}
	if n < unix.NLMSG_HDRLEN+4 {
		return fmt.Errorf("add default route: short netlink answer")
	}
	typ := binary.NativeEndian.Uint16(buf[4:6])
	if typ == unix.NLMSG_ERROR {
		if code := int32(nativeU32(buf[unix.NLMSG_HDRLEN:])); code != 0 && unix.Errno(-code) != unix.EEXIST {
			return fmt.Errorf("add default route: %w", unix.Errno(-code))
		}
	}
	return nil
}

func rtattr(typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b := make([]byte, (l+3)&^3)
	a := (*unix.RtAttr)(nlPtr(b))
	a.Len = uint16(l)
	a.Type = typ
	copy(b[unix.SizeofRtAttr:], data)
	return b
}

func u32(v uint32) []byte {
	b := make([]byte, 4)
	putInt32(b, int32(v))
	return b
}

func waitFor(path string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
