package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// MaxEntries bounds the entries of one allowlist.
const MaxEntries = 4096

// Policy is a compiled egress allowlist: which names (and address
// literals) a session may reach, on which ports. It judges names only; the
// addresses they resolve to are the Guard's to check.
type Policy struct {
	patterns []Pattern
}

// Compile parses entries (ParsePattern syntax) into a Policy, refusing an
// address entry in a blocked range. Duplicates are harmless.
func Compile(entries []string) (*Policy, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("compile egress policy: %d entries, at most %d", len(entries), MaxEntries)
	}
	p := &Policy{patterns: make([]Pattern, 0, len(entries))}
	for i, e := range entries {
		pat, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("compile egress policy: entry %d: %w", i, err)
		}
		p.patterns = append(p.patterns, pat)
	}
	return p, nil
}

// CheckEntry is the check Compile makes of each entry: its syntax
// (ParsePattern) and, for an address, that no allowlist can reach it
// (Pattern.Reachable). Where an allowlist is given (a session, a profile),
// running it refuses there what a host would refuse at boot. The error
// names the entry as written.
func CheckEntry(entry string) error {
	_, err := parseEntry(entry)
	return err
}

func parseEntry(entry string) (Pattern, error) {
	pat, err := ParsePattern(entry)
	if err == nil {
		err = pat.Reachable()
	}
	return pat, err
}

// Entries are the entries compiled, in order.
func (p *Policy) Entries() []string {
	out := make([]string, len(p.patterns))
	for i, pat := range p.patterns {
		out[i] = pat.entry
	}
	return out
}

// AllowName says whether name on port is allowed, and why (or why not);
// port 0 asks whether it is allowed on some port (the resolver asks so
// before any port is known). name is a DNS name (any case, one trailing
// dot allowed) or an IP literal ("[v6]" too); an address in a blocked
// range is never allowed.
func (p *Policy) AllowName(name string, port uint16) (ok bool, reason string) {
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")); err == nil {
		return p.allowAddr(a.Unmap(), port)
	}
	n, valid := normalizeName(name)
	if !valid {
		return false, fmt.Sprintf("%.80q is not a valid host name", name)
	}
	var portsFor []string
	for _, pat := range p.patterns {
		if !pat.matchesName(n) {
			continue
		}
		if port == 0 || slices.Contains(pat.ports(), port) {
			return true, fmt.Sprintf("allowed by %q", pat.entry)
		}
		portsFor = append(portsFor, pat.entry)
	}
	if len(portsFor) > 0 {
		return false, fmt.Sprintf("port %d of %s is not allowed (%s; no port means %s)", port, n, quoteAll(portsFor), portList(DefaultPorts))
	}
	return false, n + " is not in the allowlist"
}

func (p *Policy) allowAddr(a netip.Addr, port uint16) (bool, string) {
	if reason, blocked := BlockedRange(a); blocked {
		return false, fmt.Sprintf("%s is blocked: %s", a, reason)
	}
	for _, pat := range p.patterns {
		if pat.Addr == a.WithZone("") && (port == 0 || slices.Contains(pat.ports(), port)) {
			return true, fmt.Sprintf("allowed by %q", pat.entry)
		}
	}
	return false, fmt.Sprintf("%s port %d is not in the allowlist", a, port)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "entries " + strings.Join(q, ", ")
}

func portList(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, " and ")
}
