package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Resolver looks names up (*net.Resolver does).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ContextDialer dials an address (*net.Dialer does).
type ContextDialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// GuardConfig says what a Guard lets through besides public addresses,
// and what it uses to resolve and dial.
type GuardConfig struct {
	// Allow are the operator's overrides (ParseAllowances): they lift the
	// range block, never the unspecified or broadcast address, nor
	// BlockedPorts.
	Allow []Allowance
	// Blocked are this deployment's own addresses (the host's), refused
	// like a blocked range unless allowed, in every form: an IPv6 address
	// that reaches one of them (IPv4-mapped, SIIT, NAT64 64:ff9b::/96,
	// 6to4 2002::/16, a Teredo client) is judged as that address.
	Blocked []netip.Prefix
	// BlockedPorts are this deployment's own listeners (the coordinator's,
	// the host agent's): refused on every address that is not public (a
	// blocked range or Blocked), whatever Allow says.
	BlockedPorts []uint16
	Resolver     Resolver      // nil: net.DefaultResolver
	Dialer       ContextDialer // nil: a net.Dialer (30s timeout)
}

// maxAnswers bounds the addresses of one name a Guard considers, and
// maxAttempts the checked addresses it tries to connect to.
const (
	maxAnswers  = 64
	maxAttempts = 4
)

// Guard enforces the address policy on what a process dials itself.
type Guard struct {
	cfg GuardConfig
}

// NewGuard returns a Guard.
func NewGuard(cfg GuardConfig) *Guard {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	}
	return &Guard{cfg: cfg}
}

// CheckAddr says whether ap may be dialled; a refusal wraps ErrBlocked and
// names the range.
func (g *Guard) CheckAddr(ap netip.AddrPort) error {
	return g.check(ap, false)
}

// check judges ap; nameAllowed is whether the name it came from is one
// the operator allowed.
func (g *Guard) check(ap netip.AddrPort, nameAllowed bool) error {
	addr := ap.Addr()
	if !addr.IsValid() || ap.Port() == 0 {
		return &BlockedError{Addr: ap, Reason: "not an address and port"}
	}
	j := judge(addr)
	own := g.own(addr.WithZone("").Unmap()) || (j.v4.IsValid() && g.own(j.v4))
	switch {
	case j.final:
		return &BlockedError{Addr: ap, Reason: j.reason}
	case (own || j.reason != "") && slices.Contains(g.cfg.BlockedPorts, ap.Port()):
		return &BlockedError{Addr: ap, Reason: fmt.Sprintf("port %d of this deployment's own services", ap.Port())}
	case nameAllowed || slices.ContainsFunc(g.cfg.Allow, func(a Allowance) bool { return a.coversAddr(ap, j.v4) }):
		return nil
	case own:
		return &BlockedError{Addr: ap, Reason: "one of this deployment's own addresses"}
	case j.reason != "":
		return &BlockedError{Addr: ap, Reason: j.reason}
	}
	return nil
}

// own reports whether addr is one of this deployment's own addresses
// (Blocked). check asks it of the address dialled and of the IPv4 address
// an IPv6 form of it reaches (mapped, SIIT, NAT64, 6to4, Teredo), so no
// form of a host's address gets past it.
func (g *Guard) own(addr netip.Addr) bool {
	return slices.ContainsFunc(g.cfg.Blocked, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// CheckHost judges host and port without resolving anything: an IP
// literal as CheckAddr does, "localhost" and names under ".localhost" as
// loopback, a name an allowance covers as allowed. Other names pass here;
// DialContext judges what they resolve to.
func (g *Guard) CheckHost(host string, port uint16) error {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return g.CheckAddr(netip.AddrPortFrom(a, port))
	}
	name, _ := normalizeName(h)
	if g.nameAllowed(name, port) {
		return g.check(netip.AddrPortFrom(netip.IPv6Loopback(), port), true)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		if err := g.CheckAddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)); err != nil {
			var be *BlockedError
			if errors.As(err, &be) {
				be.Host = name
			}
			return err
		}
	}
	return nil
}

func (g *Guard) nameAllowed(name string, port uint16) bool {
	return slices.ContainsFunc(g.cfg.Allow, func(a Allowance) bool { return a.coversName(name, port) })
}

// DialContext dials hostport on network (tcp, tcp4, tcp6, udp, udp4,
// udp6). A name is resolved here, once; every address is checked and only
// a checked one is dialled, as a literal (nothing re-resolves it). It is
// refused, wrapping ErrBlocked, when no address passes. Usable as
// http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, hostport string) (net.Conn, error) {
	lookup, err := lookupNetwork(network)
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", hostport, err)
	}
	n, err := strconv.Atoi(portStr)
	if err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("dial %s: port %q is not 1 to 65535", hostport, portStr)
	}
	port := uint16(n)
	if a, err := netip.ParseAddr(host); err == nil {
		ap := netip.AddrPortFrom(a, port)
		if err := g.CheckAddr(ap); err != nil {
			return nil, fmt.Errorf("dial %s: %w", hostport, err)
		}
		return g.cfg.Dialer.DialContext(ctx, network, ap.String())
	}
	name, ok := normalizeName(host)
	if !ok {
		return nil, fmt.Errorf("dial %.80q: not a host name", host)
	}
	addrs, err := g.cfg.Resolver.LookupNetIP(ctx, lookup, name)
	if err != nil {
		return nil, fmt.Errorf("dial %s: resolve: %w", hostport, err)
	}
	checked, err := g.checkAll(name, port, addrs)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", hostport, err)
	}
	var last error
	for i, ap := range checked {
		if i == maxAttempts {
			break
		}
		c, err := g.cfg.Dialer.DialContext(ctx, network, ap.String())
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// checkAll returns the addresses of name that pass, in the resolver's
// order, or the refusal of the first one when none does.
func (g *Guard) checkAll(name string, port uint16, addrs []netip.Addr) ([]netip.AddrPort, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", name)
	}
	allowed := g.nameAllowed(name, port)
	var out []netip.AddrPort
	var first error
	for i, a := range addrs {
		if i == maxAnswers {
			break
		}
		ap := netip.AddrPortFrom(a, port)
		if err := g.check(ap, allowed); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, ap)
	}
	if len(out) == 0 {
		var be *BlockedError
		if errors.As(first, &be) {
			be.Host = name
		}
		return nil, first
	}
	return out, nil
}

func lookupNetwork(network string) (string, error) {
	switch network {
	case "tcp", "udp":
		return "ip", nil
	case "tcp4", "udp4":
		return "ip4", nil
	case "tcp6", "udp6":
		return "ip6", nil
	}
	return "", fmt.Errorf("dial: network %q is not tcp or udp", network)
}

// HTTPTransport is a clone of http.DefaultTransport that dials through the
// guard and uses no proxy (a proxy would reach what the guard refuses).
func (g *Guard) HTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	return t
}
