package egressnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/egress"
)

// brokerStandIn is the address the guest is told for a brokered name: the
// host never dials such a name (its TLS goes to the coordinator's broker,
// which resolves it), so the resolver asks no upstream about it
// (TEST-NET-2, never a real host's; routed to the gateway like standIn).
var brokerStandIn = netip.MustParseAddr("198.51.100.2")

// brokered is a machine's brokered hosts and how to reach the broker.
type brokered struct {
	ports map[string][]uint16 // name -> ports
	dial  func(ctx context.Context, hostPort string) (net.Conn, error)
}

// newBrokered parses "name:port" entries; an empty list brokers nothing.
func newBrokered(hosts []string, dial func(context.Context, string) (net.Conn, error)) (*brokered, error) {
	b := &brokered{ports: map[string][]uint16{}, dial: dial}
	for _, h := range hosts {
		name, ps, err := net.SplitHostPort(h)
		port, perr := strconv.ParseUint(ps, 10, 16)
		if err != nil || perr != nil || port == 0 || name == "" || name != strings.ToLower(name) {
			return nil, fmt.Errorf("brokered host %q: want a lower-case name:port", h)
		}
		if _, err := netip.ParseAddr(name); err == nil {
			return nil, fmt.Errorf("brokered host %q: want a name, not an address", h)
		}
		b.ports[name] = append(b.ports[name], uint16(port))
	}
	return b, nil
}

// broker is the proxy's Broker; nil when nothing is brokered.
func (b *brokered) broker() egress.Broker {
	if len(b.ports) == 0 {
		return nil
	}
	return b
}

// Brokers is egress.Broker.
func (b *brokered) Brokers(host string, port uint16) bool {
	for _, p := range b.ports[host] {
		if p == port {
			return true
		}
	}
	return false
}

// Dial is egress.Broker.
func (b *brokered) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	if b.dial == nil {
		return nil, errors.New("this host has no link to a credential broker")
	}
	return b.dial(ctx, net.JoinHostPort(host, strconv.Itoa(int(port))))
}

// upstream answers a brokered name with brokerStandIn, asking inner about
// every other name.
func (b *brokered) upstream(inner egress.Upstream) egress.Upstream {
	if len(b.ports) == 0 {
		return inner
	}
	return brokeredUpstream{b: b, inner: inner}
}

type brokeredUpstream struct {
	b     *brokered
	inner egress.Upstream
}

func (u brokeredUpstream) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if _, ok := u.b.ports[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		if network == "ip6" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{brokerStandIn}, nil
	}
	return u.inner.LookupNetIP(ctx, network, host)
}

// addrs keeps brokerStandIn in answers (inner judges the rest).
func (b *brokered) addrs(inner egress.Addrs) egress.Addrs {
	if len(b.ports) == 0 {
		return inner
	}
	return standInAddrs{inner}
}

type standInAddrs struct{ inner egress.Addrs }

func (a standInAddrs) CheckAddr(ap netip.AddrPort) error {
	if ap.Addr() == brokerStandIn {
		return nil
	}
	return a.inner.CheckAddr(ap)
}
