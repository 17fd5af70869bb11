package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrBlocked is the category of every refusal to reach an address: a
// *BlockedError wraps it.
var ErrBlocked = errors.New("address blocked by the address policy")

// BlockedError says which address was refused and why.
type BlockedError struct {
	Host   string         // the name dialled, if it was one
	Addr   netip.AddrPort // the address refused (the first one, for a name)
	Reason string         // e.g. "loopback 127.0.0.0/8"
	Entry  string         // the allowlist entry naming Addr, as written (Pattern.Reachable)
}

func (e *BlockedError) Error() string {
	if e.Entry != "" {
		return fmt.Sprintf("%s is blocked: %s", e.Entry, e.Reason)
	}
	a := e.Addr.String()
	if e.Addr.Port() == 0 && e.Addr.Addr().IsValid() {
		a = e.Addr.Addr().String()
	}
	if e.Host != "" {
		return fmt.Sprintf("%s resolves only to blocked addresses: %s is %s", e.Host, a, e.Reason)
	}
	return fmt.Sprintf("%s is blocked: %s", a, e.Reason)
}

// Is makes errors.Is(err, ErrBlocked) true.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// blockedRange is one always-blocked prefix and what it is.
type blockedRange struct {
	prefix netip.Prefix
	what   string
	final  bool // no operator allowance lifts it (nothing could listen there)
}

func r(prefix, what string) blockedRange {
	return blockedRange{prefix: netip.MustParsePrefix(prefix), what: what}
}

// blockedV4 are the IPv4 ranges never dialled unless allowed; the first
// match names the range (broadcast before the reserved block holding it).
var blockedV4 = []blockedRange{
	{prefix: netip.MustParsePrefix("0.0.0.0/32"), what: "the unspecified address", final: true},
	{prefix: netip.MustParsePrefix("255.255.255.255/32"), what: "the broadcast address", final: true},
	r("0.0.0.0/8", `"this network"`),
	r("10.0.0.0/8", "private"),
	r("100.64.0.0/10", "shared address space (CGNAT)"),
	r("127.0.0.0/8", "loopback"),
	r("169.254.0.0/16", "link-local (cloud metadata)"),
	r("172.16.0.0/12", "private"),
	r("192.0.0.0/24", "IETF protocol assignments"),
	r("192.168.0.0/16", "private"),
	r("198.18.0.0/15", "benchmarking"),
	r("224.0.0.0/4", "multicast"),
	r("240.0.0.0/4", "reserved"),
}

// blockedV6 are the IPv6 ranges never dialled unless allowed. IPv6 forms
// that carry an IPv4 address (mapped, 6to4, NAT64, Teredo, SIIT) are
// judged by that address as well (embeddedV4).
var blockedV6 = []blockedRange{
	{prefix: netip.MustParsePrefix("::/128"), what: "the unspecified address", final: true},
	r("::1/128", "loopback"),
	r("::/96", "IPv4-compatible (deprecated)"),
	r("64:ff9b:1::/48", "local-use NAT64"),
	r("fc00::/7", "unique local (ULA)"),
	r("fe80::/10", "link-local"),
	r("fec0::/10", "site-local (deprecated)"),
	r("ff00::/8", "multicast"),
}

// embeddings are the IPv6 prefixes whose addresses reach an IPv4 address
// (through a relay or a translator), and where that address sits.
var embeddings = []struct {
	prefix netip.Prefix
	what   string
	v4     func(b [16]byte) [4]byte
}{
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped", func(b [16]byte) [4]byte { return [4]byte(b[12:16]) }},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated (SIIT)", func(b [16]byte) [4]byte { return [4]byte(b[12:16]) }},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", func(b [16]byte) [4]byte { return [4]byte(b[12:16]) }},
	{netip.MustParsePrefix("2002::/16"), "6to4", func(b [16]byte) [4]byte { return [4]byte(b[2:6]) }},
	{netip.MustParsePrefix("2001::/32"), "Teredo", func(b [16]byte) [4]byte {
		return [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
	}},
}

// judged is the verdict on one address.
type judged struct {
	reason string // "" when not in an always-blocked range
	final  bool
	v4     netip.Addr // the IPv4 address it reaches, if it embeds one
}

// judge says whether addr is in an always-blocked range, directly or
// through the IPv4 address an IPv6 form of it carries.
func judge(addr netip.Addr) judged {
	addr = addr.WithZone("") // a zoned address is link-scoped; netip.Prefix never contains one
	if addr.Is4() {
		return judgeV4(addr)
	}
	for _, rg := range blockedV6 {
		if rg.prefix.Contains(addr) {
			return judged{reason: rg.what + " " + rg.prefix.String(), final: rg.final}
		}
	}
	for _, e := range embeddings {
		if !e.prefix.Contains(addr) {
			continue
		}
		v4 := netip.AddrFrom4(e.v4(addr.As16()))
		j := judgeV4(v4)
		if j.reason != "" {
			j.reason = fmt.Sprintf("the %s form of %s, %s", e.what, v4, j.reason)
		}
		j.v4 = v4
		return j
	}
	return judged{}
}

func judgeV4(addr netip.Addr) judged {
	for _, rg := range blockedV4 {
		if rg.prefix.Contains(addr) {
			if rg.prefix.Bits() == 32 {
				return judged{reason: rg.what, final: rg.final}
			}
			return judged{reason: rg.what + " " + rg.prefix.String(), final: rg.final}
		}
	}
	return judged{}
}

// BlockedRange reports whether addr is in a range never dialled unless an
// operator allows it, and which ("loopback 127.0.0.0/8").
func BlockedRange(addr netip.Addr) (reason string, blocked bool) {
	if !addr.IsValid() {
		return "not an address", true
	}
	j := judge(addr)
	return j.reason, j.reason != ""
}
