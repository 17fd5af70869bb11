package egress

import (
	"net/netip"
	"strconv"
	"strings"
)

// maxNameBytes bounds a DNS name (253 bytes, RFC 1035 less the root).
const maxNameBytes = 253

// hostName normalizes a DNS name the guest sent (an SNI, a Host header,
// a query): lower case, one trailing dot removed, labels of letters,
// digits, '-' and '_' of 1 to 63 bytes, at most 253 bytes in all. An IP
// literal is not a name: ok is false.
func hostName(s string) (name string, ok bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > maxNameBytes {
		return "", false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", false
	}
	b := []byte(s)
	label := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", false
			}
			label = 0
			continue
		default:
			return "", false
		}
		if label++; label > 63 {
			return "", false
		}
	}
	if label == 0 {
		return "", false
	}
	return string(b), true
}

// hostPort is a destination the guest named: a DNS name (normalized) or
// an IP literal (unbracketed), and a port.
type hostPort struct {
	host string
	port uint16
	ip   bool
	sent string // host as the guest wrote it (case kept), for the log; "" when host is all there is
}

// named is the host as the guest named it, for the log.
func (hp hostPort) named() string {
	if hp.sent != "" {
		return hp.sent
	}
	return hp.host
}

// String is host:port as a Dialer takes it.
func (hp hostPort) String() string {
	return joinHostPort(hp.host, hp.port)
}

func joinHostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// parseAuthority parses host[:port] (a Host header, a CONNECT target, a
// URL's authority): a DNS name or an IP literal ("[v6]" for IPv6).
// Without a port, defPort; needPort refuses that.
func parseAuthority(s string, defPort uint16, needPort bool) (hostPort, bool) {
	host, portText := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return hostPort{}, false
		}
		host, portText = s[1:end], s[end+1:]
		if portText != "" {
			if portText[0] != ':' {
				return hostPort{}, false
			}
			portText = portText[1:]
			if portText == "" {
				return hostPort{}, false
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return hostPort{}, false
		}
		host = a.String()
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, portText = s[:i], s[i+1:]
		if portText == "" {
			return hostPort{}, false
		}
	}
	hp := hostPort{port: defPort}
	if portText != "" {
		p, ok := parsePort(portText)
		if !ok {
			return hostPort{}, false
		}
		hp.port = p
	} else if needPort {
		return hostPort{}, false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || (a.Is6() && !strings.HasPrefix(s, "[")) {
			return hostPort{}, false
		}
		hp.host, hp.ip = a.String(), true
		return hp, true
	}
	name, ok := hostName(host)
	if !ok {
		return hostPort{}, false
	}
	hp.host, hp.sent = name, host
	return hp, true
}

// parsePort parses 1 to 5 decimal digits as a port in 1..65535.
func parsePort(s string) (uint16, bool) {
	if len(s) == 0 || len(s) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n == 0 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}
