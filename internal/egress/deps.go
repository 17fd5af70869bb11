package egress

import (
	"context"
	"net"
	"net/netip"
)

// AnyPort is the port the resolver asks Names about: "on some port". A
// name is resolved when the guest may reach it on any port (the proxy
// asks again, with the port, before it dials).
const AnyPort uint16 = 0

// Names says whether the guest may reach name on port, and why (or why
// not). The name is lower case, without a trailing dot; an IP literal
// reaches Names only from a Host header or a CONNECT target.
// netpolicy.Policy satisfies it.
type Names interface {
	AllowName(name string, port uint16) (ok bool, reason string)
}

// Dialer dials a host:port by name: it resolves the name itself, checks
// every address and dials exactly one it checked (netpolicy.Guard). The
// proxy never hands it an address the guest chose.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Upstream resolves names for the resolver (a *net.Resolver does).
// network is "ip4" or "ip6".
type Upstream interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Addrs judges an address the upstream answered; a non-nil error drops
// it from the answer. netpolicy.Guard satisfies it.
type Addrs interface {
	CheckAddr(ap netip.AddrPort) error
}

// answerCheckPort is the port the resolver judges answered addresses on:
// the blocked ranges do not depend on it, and the proxy checks again, on
// the port dialled, when it dials the name.
const answerCheckPort = 443

// OriginalDst is the address a redirected connection was made to, before
// the namespace's rules sent it to the proxy (vmnet.OriginalDst,
// SO_ORIGINAL_DST). The proxy uses only its port.
type OriginalDst func(net.Conn) (netip.AddrPort, error)

// Broker takes the TLS connections to brokered hosts (a profile
// credential's git host): the proxy hands their bytes, ClientHello
// included, to the coordinator's credential broker, which terminates TLS,
// verifies the upstream and puts the credential in; the proxy never dials
// them itself.
type Broker interface {
	// Brokers reports whether TLS to host on port goes to the broker.
	Brokers(host string, port uint16) bool
	// Dial opens a connection to the broker for host:port.
	Dial(ctx context.Context, host string, port uint16) (net.Conn, error)
}
