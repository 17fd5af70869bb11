package vmnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config says where the guest's traffic lands inside the namespace.
type Config struct {
	ProxyPort    uint16 // every TCP connection of the guest; default DefaultProxyPort
	ResolverPort uint16 // the guest's DNS, UDP and TCP port 53; default DefaultResolverPort
}

func (c Config) withDefaults() Config {
	if c.ProxyPort == 0 {
		c.ProxyPort = DefaultProxyPort
	}
	if c.ResolverPort == 0 {
		c.ResolverPort = DefaultResolverPort
	}
	return c
}

// Net is one machine's network namespace with its TAP device and rules.
// Its methods are safe for concurrent use.
type Net struct {
	cfg      Config
	ns       nsHandles
	tap      *os.File
	tapIndex int

	mu      sync.Mutex
	closed  bool
	sockets []interface{ Close() error } // opened by Listen and ListenPacket
}

// New creates a fresh network namespace holding only a TAP device
// (TapName, HostAddr/GuestPrefix, HostMAC, up, IPv6 off), with no
// forwarding and the rules of installRules, and returns it. It needs
// CAP_NET_ADMIN and CAP_SYS_ADMIN (Available says whether this host
// allows it). Close removes it all.
func New(ctx context.Context, cfg Config) (*Net, error) {
	cfg = cfg.withDefaults()
	if cfg.ProxyPort == cfg.ResolverPort {
		return nil, fmt.Errorf("new machine network: proxy and resolver share port %d", cfg.ProxyPort)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("new machine network: %w", err)
	}
	n := &Net{cfg: cfg}
	var err error
	n.ns, err = inNewNS(func() error {
		// IPv6 off before the TAP exists, so it never gets an address;
		// forwarding off whatever the host's namespace has.
		for _, s := range [][2]string{{"ipv6/conf/all/disable_ipv6", "1"}, {"ipv6/conf/default/disable_ipv6", "1"}} {
			if err := sysctl(s[0], s[1], true); err != nil {
				return err
			}
		}
		for _, s := range []string{"ipv4/ip_forward", "ipv4/conf/all/forwarding", "ipv4/conf/default/forwarding"} {
			if err := sysctl(s, "0", false); err != nil {
				return err
			}
		}
		var err error
		n.tap, err = openTap(TapName)
		return err
	})
	if err != nil {
		if n.tap != nil {
			n.tap.Close() // the namespace goes with it
		}
		return nil, fmt.Errorf("new machine network: %w", err)
	}
	if err := n.configure(); err != nil {
		n.Close()
		return nil, fmt.Errorf("new machine network: %w", err)
	}
	return n, nil
}

// configure gives the TAP its addresses and brings it up, then installs
// the rules.
func (n *Net) configure() error {
	h, err := netlink.NewHandleAt(netns.NsHandle(n.ns.machine), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in the machine's namespace: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(TapName)
	if err != nil {
		return fmt.Errorf("find %s: %w", TapName, err)
	}
	if err := h.LinkSetHardwareAddr(link, HostMAC); err != nil {
		return fmt.Errorf("set %s address: %w", TapName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: HostAddr.AsSlice(), Mask: net.CIDRMask(GuestPrefix, 32)}}
	if err := h.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address %s: %w", TapName, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring %s up: %w", TapName, err)
	}
	n.tapIndex = link.Attrs().Index
	return installRules(n.ns.machine, n.tapIndex, n.cfg.ProxyPort, n.cfg.ResolverPort)
}

// TapFile is the TAP device's fd, for the VMM to inherit (QEMU: -netdev
// tap,fd=N through exec.Cmd.ExtraFiles). It stays the Net's: Close
// closes it.
func (n *Net) TapFile() *os.File { return n.tap }

// ProxyAddr is where every TCP connection from the guest lands. A
// connection whose OriginalDst is HostAddr itself was made to the
// gateway: a guest using HostAddr as its explicit HTTP proxy.
func (n *Net) ProxyAddr() netip.AddrPort { return netip.AddrPortFrom(HostAddr, n.cfg.ProxyPort) }

// ResolverAddr is where the guest's DNS lands, over UDP and TCP.
func (n *Net) ResolverAddr() netip.AddrPort { return netip.AddrPortFrom(HostAddr, n.cfg.ResolverPort) }

// ErrClosed is returned by a Net's methods after Close.
var ErrClosed = errors.New("machine network closed")

// Listen opens a TCP listener ("tcp" or "tcp4") inside the machine's
// namespace on addr, an address:port literal (e.g. ProxyAddr). Accepted
// connections are the guest's; Close closes the listener too.
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	if network != "tcp" && network != "tcp4" {
		return nil, fmt.Errorf("listen in machine namespace: network %q: want tcp", network)
	}
	var ln net.Listener
	err := n.open(addr, func(ap string) (c interface{ Close() error }, err error) {
		ln, err = net.Listen("tcp4", ap)
		return ln, err
	})
	return ln, err
}

// ListenPacket opens a UDP socket ("udp" or "udp4") inside the machine's
// namespace on addr, an address:port literal (e.g. ResolverAddr); Close
// closes it too.
func (n *Net) ListenPacket(network, addr string) (net.PacketConn, error) {
	if network != "udp" && network != "udp4" {
		return nil, fmt.Errorf("listen in machine namespace: network %q: want udp", network)
	}
	var pc net.PacketConn
	err := n.open(addr, func(ap string) (c interface{ Close() error }, err error) {
		pc, err = net.ListenPacket("udp4", ap)
		return pc, err
	})
	return pc, err
}

// open runs listen inside the namespace for a literal address (never a
// name: a lookup could run on another thread, in another namespace) and
// keeps the socket for Close.
func (n *Net) open(addr string, listen func(string) (interface{ Close() error }, error)) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("listen in machine namespace: %q is not an IPv4 address:port literal", addr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return fmt.Errorf("listen in machine namespace: %w", ErrClosed)
	}
	var sock interface{ Close() error }
	err = n.ns.in(func() error {
		var err error
		sock, err = listen(ap.String())
		return err
	})
	if err != nil {
		if sock != nil {
			sock.Close()
		}
		return fmt.Errorf("listen in machine namespace on %s: %w", ap, err)
	}
	n.sockets = append(n.sockets, sock)
	return nil
}

// Close deletes the TAP device, closes every socket opened through the
// Net and lets the namespace go (the kernel frees it once nothing holds
// it). Call it once the VMM has exited: one still holding the TAP sees it
// vanish. Idempotent.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.tapIndex != 0 {
		if h, err := netlink.NewHandleAt(netns.NsHandle(n.ns.machine), unix.NETLINK_ROUTE); err == nil {
			if link, err := h.LinkByIndex(n.tapIndex); err == nil {
				if err := h.LinkDel(link); err != nil {
					errs = append(errs, fmt.Errorf("delete %s: %w", TapName, err))
				}
			}
			h.Close()
		} else {
			errs = append(errs, err)
		}
	}
	for _, s := range n.sockets {
		_ = s.Close()
	}
	n.sockets = nil
	if n.tap != nil {
		if err := n.tap.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.ns.close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close machine network: %w", err)
	}
	return nil
}
