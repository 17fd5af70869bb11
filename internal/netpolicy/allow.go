package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Allowance is one operator override lifting the range block for an
// address prefix or a host name (a registry or a model provider on a
// private network): an address, "ip:port", "[v6]:port" or a CIDR prefix;
// or a name pattern as ParsePattern reads it. Without a port it covers
// every port (unlike an egress entry, which then means 80 and 443).
type Allowance struct {
	Prefix  netip.Prefix // valid for an address or prefix entry
	Pattern Pattern      // Name set for a name entry
	Port    uint16       // 0: every port
	entry   string
}

// String is the entry as written.
func (a Allowance) String() string { return a.entry }

// ParseAllowance parses one override; names are folded to lower case.
func ParseAllowance(entry string) (Allowance, error) {
	s := strings.ToLower(strings.TrimSpace(entry))
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Allowance{}, fmt.Errorf("allowance %q: want HOST[:PORT], an IP address or a CIDR prefix: %v", entry, err)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return Allowance{}, fmt.Errorf("allowance %q: an IPv4-mapped prefix shorter than /96", entry)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return Allowance{Prefix: p.Masked(), entry: entry}, nil
	}
	pat, err := ParsePattern(s)
	if err != nil {
		return Allowance{}, fmt.Errorf("allowance: %w", err)
	}
	a := Allowance{Pattern: pat, Port: pat.Port, entry: entry}
	if pat.Addr.IsValid() {
		a.Prefix = netip.PrefixFrom(pat.Addr.WithZone(""), pat.Addr.BitLen())
		a.Pattern = Pattern{}
	}
	return a, nil
}

// ParseAllowances parses overrides (flags and environment of the server).
func ParseAllowances(entries []string) ([]Allowance, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("%d allowances, at most %d", len(entries), MaxEntries)
	}
	out := make([]Allowance, 0, len(entries))
	for _, e := range entries {
		a, err := ParseAllowance(e)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// LoopbackAllowances allow this machine's loopback (127.0.0.0/8, ::1,
// localhost) on every port but the blocked ones: for `engrams dev`, whose
// local registry or model server is on localhost, and for tests.
func LoopbackAllowances() []Allowance {
	return []Allowance{
		{Prefix: netip.MustParsePrefix("127.0.0.0/8"), entry: "127.0.0.0/8"},
		{Prefix: netip.MustParsePrefix("::1/128"), entry: "::1"},
		{Pattern: Pattern{Name: "localhost", entry: "localhost"}, entry: "localhost"},
	}
}

// coversAddr reports whether the override lifts the block for ap.
func (a Allowance) coversAddr(ap netip.AddrPort, v4 netip.Addr) bool {
	if !a.Prefix.IsValid() || (a.Port != 0 && a.Port != ap.Port()) {
		return false
	}
	addr := ap.Addr().WithZone("").Unmap()
	return a.Prefix.Contains(addr) || (v4.IsValid() && a.Prefix.Contains(v4))
}

// coversName reports whether the override lifts the block for every
// address name (normalized) resolves to, on port.
func (a Allowance) coversName(name string, port uint16) bool {
	return a.Pattern.Name != "" && (a.Port == 0 || a.Port == port) && a.Pattern.matchesName(name)
}
