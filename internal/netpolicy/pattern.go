package netpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPorts are the ports an allowlist entry without one allows.
var DefaultPorts = []uint16{80, 443}

// Pattern is one parsed allowlist entry: "name", "name:port",
// "*.suffix[:port]", an IP address, "ip:port" or "[v6]:port".
type Pattern struct {
	Name     string     // lower-case DNS name (the suffix, for a wildcard); "" for an address
	Wildcard bool       // "*.Name": names ending in "."+Name, never Name itself
	Addr     netip.Addr // valid for an address entry (IPv4-mapped forms unmapped)
	Port     uint16     // 0: none given
	entry    string
}

// String is the entry as written.
func (p Pattern) String() string { return p.entry }

// ParsePattern parses one entry. Names are lower-case DNS names of 1 to
// 253 bytes (labels of a-z, 0-9 and inner hyphens); a port is 1 to 65535
// written without leading zeros. It judges syntax only: see
// Pattern.Reachable for the address check.
func ParsePattern(entry string) (Pattern, error) {
	p := Pattern{entry: entry}
	if a, err := netip.ParseAddr(entry); err == nil {
		p.Addr = a.Unmap()
		return p, nil
	}
	host := entry
	if strings.Contains(entry, ":") {
		h, port, err := net.SplitHostPort(entry)
		if err != nil {
			return Pattern{}, fmt.Errorf("%q: want host or host:port", entry)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return Pattern{}, fmt.Errorf("%q: port %q is not 1 to 65535", entry, port)
		}
		p.Port = uint16(n)
		if a, err := netip.ParseAddr(h); err == nil {
			p.Addr = a.Unmap()
			return p, nil
		}
		host = h
	}
	name, wild := strings.CutPrefix(host, "*.")
	if err := checkName(name); err != nil {
		return Pattern{}, fmt.Errorf("%q: %w", entry, err)
	}
	p.Name, p.Wildcard = name, wild
	return p, nil
}

// checkName accepts a lower-case DNS name without a trailing dot.
func checkName(name string) error {
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("want a host name of 1 to 253 bytes")
	}
	for l := range strings.SplitSeq(name, ".") {
		if !isLabel(l) {
			return fmt.Errorf("label %q is not a lower-case DNS label", l)
		}
	}
	return nil
}

// isLabel reports whether l is 1 to 63 bytes of a-z, 0-9 and hyphens, not
// starting or ending with a hyphen.
func isLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Reachable refuses an address entry in a blocked range (wrapping
// ErrBlocked): no allowlist can make it reachable.
func (p Pattern) Reachable() error {
	if !p.Addr.IsValid() {
		return nil
	}
	if reason, blocked := BlockedRange(p.Addr); blocked {
		return &BlockedError{Addr: netip.AddrPortFrom(p.Addr, p.Port), Entry: p.entry, Reason: reason + " (never reachable, whatever the allowlist says)"}
	}
	return nil
}

// ports are the ports the entry allows.
func (p Pattern) ports() []uint16 {
	if p.Port != 0 {
		return []uint16{p.Port}
	}
	return DefaultPorts
}

// matchesName reports whether name (normalized: lower-case, no trailing
// dot) is the entry's name, or below its suffix on a label boundary.
func (p Pattern) matchesName(name string) bool {
	if p.Name == "" {
		return false
	}
	if !p.Wildcard {
		return name == p.Name
	}
	return len(name) > len(p.Name)+1 && strings.HasSuffix(name, p.Name) && name[len(name)-len(p.Name)-1] == '.'
}

// normalizeName lower-cases ASCII letters (only: a non-ASCII letter is
// refused, not folded) and drops one trailing dot; ok is false when the
// result is not a DNS name.
func normalizeName(name string) (string, bool) {
	name = strings.TrimSuffix(name, ".")
	b := []byte(name)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	name = string(b)
	return name, checkName(name) == nil
}
