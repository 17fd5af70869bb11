package vmnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/testutil"
)

const wait = 5 * time.Second

func newTestNet(t *testing.T) *Net {
	t.Helper()
	if err := Available(); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	n, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func listen(t *testing.T, n *Net, addr string) *net.TCPListener {
	t.Helper()
	ln, err := n.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return ln.(*net.TCPListener)
}

func listenPacket(t *testing.T, n *Net, addr string) *net.UDPConn {
	t.Helper()
	pc, err := n.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("listen packet %s: %v", addr, err)
	}
	return pc.(*net.UDPConn)
}

// expect returns the first frame ok accepts, failing on any other IP frame
// (a reply the rules should have prevented) and after wait. Frames of
// connections made before (their FINs) are skipped.
func (p *peer) expect(what string, ok func(frame) bool) frame {
	p.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		f := p.next(time.Until(deadline))
		if ok(f) {
			return f
		}
		if f.proto == protoTCP && p.flows[f.dst.Port()] {
			continue
		}
		p.t.Errorf("while waiting for %s: unexpected frame %v", what, f)
	}
}

func (f frame) String() string {
	return fmt.Sprintf("ethertype %#04x proto %d %v → %v flags %#x icmp type %d", f.etherType, f.proto, f.src, f.dst, f.flags, f.icmpType)
}

// connect makes a TCP connection from the guest to dst by hand and returns
// what ln accepted.
func connect(t *testing.T, p *peer, ln *net.TCPListener, srcPort uint16, dst netip.AddrPort) net.Conn {
	t.Helper()
	src := netip.AddrPortFrom(GuestAddr, srcPort)
	p.flows[srcPort] = true
	p.write(tcpFrame(src, dst, 1000, 0, tcpSYN))
	synack := p.expect("syn-ack from "+dst.String(), func(f frame) bool {
		return f.proto == protoTCP && f.src == dst && f.dst == src
	})
	if synack.flags != tcpSYN|tcpACK {
		t.Fatalf("answer to a SYN for %s: flags %#x, want SYN|ACK", dst, synack.flags)
	}
	p.write(tcpFrame(src, dst, 1001, synack.seq+1, tcpACK))
	ln.SetDeadline(time.Now().Add(wait))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept the connection to %s: %v", dst, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// barrier sends a DNS query through the namespace and waits for its
// answer: every frame written before it has been handled (TAP writes are
// processed in the writer's call), and any reply to them came first.
func barrier(t *testing.T, p *peer, resolver *net.UDPConn, id int) {
	t.Helper()
	q := fmt.Appendf(nil, "barrier-%d", id)
	src := netip.AddrPortFrom(GuestAddr, 5300)
	dst := netip.MustParseAddrPort("9.9.9.9:53")
	p.write(udpFrame(src, dst, q))
	buf := make([]byte, 512)
	resolver.SetReadDeadline(time.Now().Add(wait))
	nr, from, err := resolver.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:nr]) != string(q) || from != src {
		t.Fatalf("resolver got %q from %v (%v), want %q from %v", buf[:nr], from, err, q, src)
	}
	if _, err := resolver.WriteToUDPAddrPort([]byte("answer"), from); err != nil {
		t.Fatal(err)
	}
	p.expect("the barrier's answer", func(f frame) bool {
		return f.proto == protoUDP && f.src == dst && string(f.payload) == "answer"
	})
}

func TestGuestTrafficLandsOnProxyAndResolver(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	proxy := listen(t, n, n.ProxyAddr().String())
	resolverTCP := listen(t, n, n.ResolverAddr().String())
	resolver := listenPacket(t, n, n.ResolverAddr().String())
	p := newPeer(t, n.TapFile())

	for i, tc := range []struct {
		name string
		dst  string
		ln   *net.TCPListener
	}{
		{"https to a public address", "1.2.3.4:443", proxy},
		{"the metadata address", "169.254.169.254:80", proxy},
		{"ssh", "5.6.7.8:22", proxy},
		{"a private address", "192.168.1.1:8080", proxy},
		{"the gateway as an explicit proxy", "10.0.2.2:3128", proxy},
		{"the resolver's own port on the gateway", n.ResolverAddr().String(), proxy},
		{"dns over tcp", "8.8.8.8:53", resolverTCP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := netip.MustParseAddrPort(tc.dst)
			c := connect(t, p, tc.ln, uint16(40000+i), dst)
			got, err := OriginalDst(c)
			if err != nil || got != dst {
				t.Errorf("original destination = %v, %v; want %v", got, err, dst)
			}
			if ra := c.RemoteAddr().(*net.TCPAddr).AddrPort(); ra != netip.AddrPortFrom(GuestAddr, uint16(40000+i)) {
				t.Errorf("remote address %v, want the guest's", ra)
			}
		})
	}
	t.Run("dns over udp to any address", func(t *testing.T) {
		barrier(t, p, resolver, 0)
	})
}

func TestEverythingElseIsDropped(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	resolver := listenPacket(t, n, n.ResolverAddr().String())
	// Sockets a packet would reach if the rules let it in.
	udp443 := listenPacket(t, n, netip.AddrPortFrom(HostAddr, 443).String())
	p := newPeer(t, n.TapFile())
	src := netip.AddrPortFrom(GuestAddr, 41000)

	for i, tc := range []struct {
		name  string
		frame []byte
	}{
		{"ping the gateway", icmpEchoFrame(HostAddr)},
		{"ping a public address", icmpEchoFrame(netip.MustParseAddr("1.1.1.1"))},
		{"quic to the gateway", udpFrame(src, netip.AddrPortFrom(HostAddr, 443), []byte("quic"))},
		{"quic to a public address", udpFrame(src, netip.MustParseAddrPort("1.2.3.4:443"), []byte("quic"))},
		{"udp to the resolver's port, not 53", udpFrame(src, n.ResolverAddr(), []byte("direct"))},
		{"tcp over ipv6", ipv6TCPFrame(netip.MustParseAddrPort("[2001:db8::1]:443"))},
		{"tcp over ipv6 to a link-local address", ipv6TCPFrame(netip.MustParseAddrPort("[fe80::1]:443"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.write(tc.frame)
			// Any answer (echo reply, RST, ICMP error) arrives before the
			// barrier's, and expect fails on it; so would a packet landing
			// on the resolver before the barrier's query.
			barrier(t, p, resolver, i+1)
			udp443.SetReadDeadline(time.Now())
			if nr, from, err := udp443.ReadFromUDPAddrPort(make([]byte, 64)); err == nil {
				t.Errorf("udp :443 on the gateway got %d bytes from %v", nr, from)
			}
		})
	}
}

func TestNamespaceHoldsOnlyTheTap(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	h, err := netlink.NewHandleAt(netns.NsHandle(n.ns.machine), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
		if l.Attrs().Name == TapName && l.Attrs().HardwareAddr.String() != HostMAC.String() {
			t.Errorf("%s has MAC %v, want %v", TapName, l.Attrs().HardwareAddr, HostMAC)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"lo", TapName}) {
		t.Errorf("links in the namespace: %v, want lo and %s only", names, TapName)
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	if !slices.Equal(got, []string{"10.0.2.2/24"}) {
		t.Errorf("addresses in the namespace: %v, want 10.0.2.2/24 only (no IPv6, lo down)", got)
	}
	routes, err := h.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Gw != nil || r.Dst.String() != "10.0.2.0/24" {
			t.Errorf("route %v: want only the TAP's connected 10.0.2.0/24", r)
		}
	}
	err = n.ns.in(func() error {
		for file, want := range map[string]string{
			"ipv6/conf/" + TapName + "/disable_ipv6": "1",
			"ipv4/ip_forward":                        "0",
		} {
			b, err := os.ReadFile("/proc/sys/net/" + file)
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("net/%s = %q, %v; want %s", file, b, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two machines' namespaces have the same addresses and never see each
// other's traffic: a new machine starts with only its own listeners.
func TestNamespacesAreSeparate(t *testing.T) {
	a, b := newTestNet(t), newTestNet(t)
	t.Parallel()
	lnA, lnB := listen(t, a, a.ProxyAddr().String()), listen(t, b, b.ProxyAddr().String())
	pB := newPeer(t, b.TapFile())
	dst := netip.MustParseAddrPort("1.2.3.4:443")
	connect(t, pB, lnB, 42000, dst)
	lnA.SetDeadline(time.Now())
	if c, err := lnA.Accept(); err == nil {
		c.Close()
		t.Error("machine A's proxy accepted machine B's connection")
	}
}

func TestClose(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	ln := listen(t, n, n.ProxyAddr().String())
	tap := n.TapFile()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept after close: %v, want net.ErrClosed", err)
	}
	if _, err := tap.Write(arpReply()); err == nil {
		t.Error("the TAP fd still works after close")
	}
	if _, err := n.Listen("tcp", n.ProxyAddr().String()); !errors.Is(err, ErrClosed) {
		t.Errorf("listen after close: %v, want ErrClosed", err)
	}
}

func TestConfigAndAddresses(t *testing.T) {
	t.Parallel()
	if _, err := New(context.Background(), Config{ProxyPort: 7000, ResolverPort: 7000}); err == nil {
		t.Error("proxy and resolver on one port accepted")
	}
	if got := GuestPrefixString(); got != "10.0.2.15/24" {
		t.Errorf("guest prefix %q", got)
	}
	n := &Net{cfg: Config{ProxyPort: 1, ResolverPort: 2}}
	if _, err := n.Listen("tcp", "localhost:80"); err == nil {
		t.Error("listen on a name accepted")
	}
	if _, err := n.Listen("tcp6", "10.0.2.2:80"); err == nil {
		t.Error("listen on tcp6 accepted")
	}
}

// BenchmarkNew measures making and removing one machine network.
func BenchmarkNew(b *testing.B) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		n, err := New(context.Background(), Config{})
		if err != nil {
			b.Fatal(err)
		}
		n.Close()
	}
}
