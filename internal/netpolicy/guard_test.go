package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeResolver answers each name from a script, one answer per lookup in
// turn (the last repeats): a TTL-0 name whose answers change every query.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]string
	calls   map[string]int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	script, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.calls[host], len(script)-1)
	r.calls[host]++
	var out []netip.Addr
	for _, s := range script[i] {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// fakeDialer records what it is asked to dial; addresses in fail refuse.
type fakeDialer struct {
	mu     sync.Mutex
	dialed []string
	fail   map[string]bool
}

func (d *fakeDialer) DialContext(_ context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	fail := d.fail[address]
	d.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("dial %s %s: connection refused", network, address)
	}
	c, s := net.Pipe()
	go func() { _ = s.Close() }()
	return c, nil
}

func (d *fakeDialer) got() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

func mustAllow(t *testing.T, entries ...string) []Allowance {
	t.Helper()
	a, err := ParseAllowances(entries)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	strict := NewGuard(GuardConfig{})
	allowing := NewGuard(GuardConfig{
		Allow:        mustAllow(t, "10.1.0.0/16", "127.0.0.1:5000", "[::1]:5001", "fd00::/8", "100.64.0.0/10"),
		Blocked:      []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")},
		BlockedPorts: []uint16{7700},
	})
	withOwn := NewGuard(GuardConfig{Blocked: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}, BlockedPorts: []uint16{7700},
		Allow: mustAllow(t, "203.0.113.0/24")})
	tests := []struct {
		g      *Guard
		name   string
		ap     string
		reason string // "" allowed
	}{
		{strict, "public", "8.8.8.8:443", ""},
		{strict, "public v6", "[2606:4700::1111]:443", ""},
		{strict, "public on a blocked-port number", "8.8.8.8:7700", ""},
		{strict, "loopback", "127.0.0.1:5000", "loopback 127.0.0.0/8"},
		{strict, "mapped loopback", "[::ffff:127.0.0.1]:5000", "IPv4-mapped form of 127.0.0.1"},
		{strict, "metadata", "169.254.169.254:80", "link-local"},
		{strict, "port 0", "8.8.8.8:0", "not an address and port"},
		{allowing, "allowed prefix", "10.1.2.3:443", ""},
		{allowing, "allowed prefix, mapped form", "[::ffff:10.1.2.3]:443", ""},
		{allowing, "outside the allowed prefix", "10.2.0.1:443", "private 10.0.0.0/8"},
		{allowing, "allowed address and port", "127.0.0.1:5000", ""},
		{allowing, "allowed address, other port", "127.0.0.1:5001", "loopback"},
		{allowing, "allowed v6 address and port", "[::1]:5001", ""},
		{allowing, "allowed ULA prefix", "[fd00::5]:443", ""},
		{allowing, "own port on an allowed prefix", "10.1.2.3:7700", "port 7700 of this deployment's own services"},
		{allowing, "own address", "203.0.113.7:443", "own addresses"},
		{allowing, "unspecified is never allowed", "0.0.0.0:5000", "unspecified"},
		{NewGuard(GuardConfig{Allow: mustAllow(t, "0.0.0.0/0", "::/0")}), "everything allowed but unspecified", "[::]:80", "unspecified"},
		{NewGuard(GuardConfig{Allow: mustAllow(t, "0.0.0.0/0")}), "everything allowed but broadcast", "255.255.255.255:80", "broadcast"},
		{NewGuard(GuardConfig{Allow: mustAllow(t, "0.0.0.0/0")}), "everything allowed", "10.9.9.9:80", ""},
		{withOwn, "own address lifted by an allowance", "203.0.113.7:443", ""},
		{withOwn, "own address, own port", "203.0.113.7:7700", "own services"},
		{withOwn, "the rest of the prefix, own port", "203.0.113.8:7700", ""},
		{NewGuard(GuardConfig{Allow: mustAllow(t, "127.0.0.1")}), "6to4 of an allowed address", "[2002:7f00:1::1]:80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.g.CheckAddr(netip.MustParseAddrPort(tt.ap))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckAddr(%s): %v, want allowed", tt.ap, err)
				}
				return
			}
			if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("CheckAddr(%s): %v, want ErrBlocked with %q", tt.ap, err, tt.reason)
			}
		})
	}
}

// TestCheckAddrOwnForms: every form of the host's own address, IPv4 or
// an IPv6 one that reaches it (mapped, SIIT, NAT64, 6to4, Teredo), is
// refused as one of the deployment's addresses; an operator's allowance
// of its prefix lifts that, never its own ports.
func TestCheckAddrOwnForms(t *testing.T) {
	t.Parallel()
	own := []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32"), netip.MustParsePrefix("2001:db8:5::7/128")}
	strict := NewGuard(GuardConfig{Blocked: own, BlockedPorts: []uint16{7700}})
	lifted := NewGuard(GuardConfig{Blocked: own, BlockedPorts: []uint16{7700}, Allow: mustAllow(t, "203.0.113.0/24")})
	// 203.0.113.7 is cb00:7107; a Teredo address carries it inverted
	// (34ff:8ef8) after its server's address and flags.
	forms := []struct{ name, addr string }{
		{"plain", "203.0.113.7"},
		{"IPv4-mapped", "::ffff:203.0.113.7"},
		{"SIIT", "::ffff:0:cb00:7107"},
		{"NAT64", "64:ff9b::cb00:7107"},
		{"NAT64, dotted", "64:ff9b::203.0.113.7"},
		{"6to4", "2002:cb00:7107::1"},
		{"6to4, another subnet and host", "2002:cb00:7107:ffff:1:2:3:4"},
		{"Teredo", "2001:0:4136:e378:8000:63bf:34ff:8ef8"},
		{"Teredo, another server", "2001:0:c000:201:0:f227:34ff:8ef8"},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			a := netip.MustParseAddr(f.addr)
			for _, tt := range []struct {
				g      *Guard
				port   uint16
				reason string
			}{
				{strict, 443, "one of this deployment's own addresses"},
				{strict, 7700, "port 7700 of this deployment's own services"},
				{lifted, 443, ""},
				{lifted, 7700, "port 7700 of this deployment's own services"},
			} {
				err := tt.g.CheckAddr(netip.AddrPortFrom(a, tt.port))
				if tt.reason == "" && err != nil || tt.reason != "" && (!errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tt.reason)) {
					t.Errorf("CheckAddr(%s port %d): %v, want %q", f.addr, tt.port, err, tt.reason)
				}
			}
		})
	}
	// Neighbours of the host's address in the same forms are public.
	for _, a := range []string{"203.0.113.8", "64:ff9b::cb00:7108", "2002:cb00:7108::1", "2001:0:4136:e378:8000:63bf:34ff:8ef7", "2001:db8:5::8"} {
		if err := strict.CheckAddr(netip.AddrPortFrom(netip.MustParseAddr(a), 443)); err != nil {
			t.Errorf("CheckAddr(%s): %v, want allowed (not the host's address)", a, err)
		}
	}
	if err := strict.CheckAddr(netip.MustParseAddrPort("[2001:db8:5::7]:443")); err == nil || !strings.Contains(err.Error(), "own addresses") {
		t.Errorf("the host's IPv6 address: %v, want refused", err)
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	strict := NewGuard(GuardConfig{BlockedPorts: []uint16{7700}})
	dev := NewGuard(GuardConfig{Allow: LoopbackAllowances(), BlockedPorts: []uint16{7700}})
	named := NewGuard(GuardConfig{Allow: mustAllow(t, "registry.lan:5000", "*.corp.example")})
	tests := []struct {
		g      *Guard
		host   string
		port   uint16
		reason string
	}{
		{strict, "127.0.0.1", 5000, "loopback"},
		{strict, "[::1]", 5000, "loopback"},
		{strict, "localhost", 5000, "localhost resolves only to blocked addresses"},
		{strict, "LocalHost.", 5000, "loopback"},
		{strict, "reg.localhost", 5000, "loopback"},
		{strict, "10.0.0.5", 443, "private"},
		{strict, "registry.example.com", 443, ""}, // judged when dialled
		{strict, "8.8.8.8", 443, ""},
		{dev, "127.0.0.1", 5000, ""},
		{dev, "localhost", 5000, ""},
		{dev, "[::1]", 5000, ""},
		{dev, "localhost", 7700, "own services"},
		{dev, "127.0.0.1", 7700, "own services"},
		{dev, "10.0.0.5", 5000, "private"},
		{named, "registry.lan", 5000, ""},
		{named, "a.corp.example", 443, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s:%d", tt.host, tt.port), func(t *testing.T) {
			t.Parallel()
			err := tt.g.CheckHost(tt.host, tt.port)
			if (err == nil) != (tt.reason == "") || (err != nil && (!errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tt.reason))) {
				t.Fatalf("CheckHost(%s, %d): %v, want %q", tt.host, tt.port, err, tt.reason)
			}
		})
	}
}

func TestDialContext(t *testing.T) {
	t.Parallel()
	res := &fakeResolver{answers: map[string][][]string{
		"mixed.example":   {{"127.0.0.1", "10.0.0.5", "93.184.216.34", "169.254.169.254", "2606:2800:220:1::1"}},
		"private.example": {{"127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "::ffff:127.0.0.1", "64:ff9b::a00:5"}},
		"empty.example":   {{}},
		"flaky.example":   {{"93.184.216.34", "93.184.216.35"}},
		"lan.example":     {{"10.0.0.5"}},
		"own.example":     {{"10.0.0.5"}},
		"host64.example":  {{"64:ff9b::cb00:7107", "2002:cb00:7107::1", "::ffff:203.0.113.7"}},
	}}
	tests := []struct {
		name     string
		cfg      GuardConfig
		network  string
		hostport string
		fail     []string
		want     []string // dialled, in order
		err      string   // "" for a connection
	}{
		{name: "mixed answers dial the first public one", hostport: "mixed.example:443", want: []string{"93.184.216.34:443"}},
		{name: "upper case and a trailing dot", hostport: "MIXED.example.:443", want: []string{"93.184.216.34:443"}},
		{name: "tcp6 looks up ip6", network: "tcp6", hostport: "mixed.example:443", want: []string{"93.184.216.34:443"}},
		{name: "all private", hostport: "private.example:443", err: "private.example resolves only to blocked addresses: 127.0.0.1:443 is loopback"},
		{name: "no answer", hostport: "empty.example:443", err: "no addresses"},
		{name: "unknown name", hostport: "nope.example:443", err: "no such host"},
		{name: "blocked literal", hostport: "127.0.0.1:5000", err: "127.0.0.1:5000 is blocked: loopback"},
		{name: "blocked v6 literal", hostport: "[::ffff:10.0.0.1]:80", err: "IPv4-mapped"},
		{name: "public literal", hostport: "93.184.216.34:80", want: []string{"93.184.216.34:80"}},
		{name: "first address refuses, the next is tried", hostport: "flaky.example:443", fail: []string{"93.184.216.34:443"},
			want: []string{"93.184.216.34:443", "93.184.216.35:443"}},
		{name: "every address refuses", hostport: "flaky.example:443", fail: []string{"93.184.216.34:443", "93.184.216.35:443"},
			want: []string{"93.184.216.34:443", "93.184.216.35:443"}, err: "connection refused"},
		{name: "name allowed by the operator", cfg: GuardConfig{Allow: mustAllow(t, "lan.example")}, hostport: "lan.example:5000", want: []string{"10.0.0.5:5000"}},
		{name: "name allowed on another port", cfg: GuardConfig{Allow: mustAllow(t, "lan.example:5000")}, hostport: "lan.example:5001", err: "private"},
		{name: "allowed name on an own port", cfg: GuardConfig{Allow: mustAllow(t, "own.example"), BlockedPorts: []uint16{7700}},
			hostport: "own.example:7700", err: "own services"},
		{name: "allowed prefix", cfg: GuardConfig{Allow: mustAllow(t, "10.0.0.0/24")}, hostport: "private.example:443", want: []string{"10.0.0.5:443"}},
		{name: "a name at the host's own address in its NAT64, 6to4 and mapped forms", cfg: GuardConfig{Blocked: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}},
			hostport: "host64.example:443", err: "host64.example resolves only to blocked addresses: [64:ff9b::cb00:7107]:443 is one of this deployment's own addresses"},
		{name: "bad network", network: "unix", hostport: "mixed.example:443", err: "not tcp or udp"},
		{name: "named port", hostport: "mixed.example:https", err: "not 1 to 65535"},
		{name: "no port", hostport: "mixed.example", err: "missing port"},
		{name: "bad name", hostport: "bad_name:443", err: "not a host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &fakeDialer{fail: map[string]bool{}}
			for _, f := range tt.fail {
				d.fail[f] = true
			}
			cfg := tt.cfg
			cfg.Resolver, cfg.Dialer = res, d
			network := tt.network
			if network == "" {
				network = "tcp"
			}
			c, err := NewGuard(cfg).DialContext(context.Background(), network, tt.hostport)
			if c != nil {
				c.Close()
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("DialContext(%s): %v, want %q", tt.hostport, err, tt.err)
			}
			if got := d.got(); strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("dialled %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDialContextNeverDialsPrivate: a name whose answers change on every
// lookup (TTL 0), mixing private and public addresses, is dialled only at
// public ones, however often it is dialled.
func TestDialContextNeverDialsPrivate(t *testing.T) {
	t.Parallel()
	private := []string{"127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "::ffff:127.0.0.1", "fd00::1", "2002:a00:5::1", "0.0.0.0", "100.64.0.1"}
	public := "93.184.216.34"
	var script [][]string
	for i, p := range private {
		script = append(script, []string{p}, []string{public, p}, []string{p, public})
		if i%2 == 0 {
			script = append(script, []string{p, private[(i+1)%len(private)]})
		}
	}
	res := &fakeResolver{answers: map[string][][]string{"rebind.example": script}}
	d := &fakeDialer{}
	g := NewGuard(GuardConfig{Resolver: res, Dialer: d})
	var ok, refused int
	for range len(script) {
		c, err := g.DialContext(context.Background(), "tcp", "rebind.example:443")
		switch {
		case err == nil:
			ok++
			c.Close()
		case errors.Is(err, ErrBlocked):
			refused++
		default:
			t.Fatalf("dial: %v", err)
		}
	}
	for _, a := range d.got() {
		if a != public+":443" {
			t.Errorf("dialled %s", a)
		}
	}
	if ok != 2*len(private) || refused != len(script)-ok {
		t.Errorf("%d connections, %d refusals over %d lookups", ok, refused, len(script))
	}
}

// TestHTTPTransport: an HTTP client over the guard reaches an allowed
// loopback server and is refused a blocked one, without touching it.
func TestHTTPTransport(t *testing.T) {
	t.Parallel()
	var hits int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	for _, allow := range []bool{false, true} {
		cfg := GuardConfig{}
		if allow {
			cfg.Allow = LoopbackAllowances()
		}
		tr := NewGuard(cfg).HTTPTransport()
		if tr.Proxy != nil {
			t.Fatal("the transport uses a proxy, which would dial what the guard refuses")
		}
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if resp != nil {
			resp.Body.Close()
		}
		tr.CloseIdleConnections()
		if allow != (err == nil) || (!allow && !errors.Is(err, ErrBlocked)) {
			t.Errorf("allow loopback %v: %v", allow, err)
		}
	}
	if hits != 1 {
		t.Errorf("the server got %d requests, want 1", hits)
	}
}

func TestParseAllowance(t *testing.T) {
	t.Parallel()
	tests := []struct{ entry, want string }{
		{"10.0.0.0/8", "prefix=10.0.0.0/8 name= port=0"},
		{"10.1.2.3/8", "prefix=10.0.0.0/8 name= port=0"},
		{"::ffff:10.0.0.0/104", "prefix=10.0.0.0/8 name= port=0"},
		{"fd00::/8", "prefix=fd00::/8 name= port=0"},
		{"127.0.0.1", "prefix=127.0.0.1/32 name= port=0"},
		{"127.0.0.1:5000", "prefix=127.0.0.1/32 name= port=5000"},
		{"[::1]:5000", "prefix=::1/128 name= port=5000"},
		{" Registry.LAN:5000 ", "prefix=invalid Prefix name=registry.lan port=5000"},
		{"*.corp.example", "prefix=invalid Prefix name=corp.example port=0"},
		{"10.0.0.0/33", "error"},
		{"::ffff:10.0.0.0/64", "error"},
		{"bad_name", "error"},
		{"host:0", "error"},
		{"", "error"},
	}
	for _, tt := range tests {
		a, err := ParseAllowance(tt.entry)
		got := fmt.Sprintf("prefix=%s name=%s port=%d", a.Prefix, a.Pattern.Name, a.Port)
		if err != nil {
			got = "error"
		}
		if got != tt.want || (err == nil && a.String() != tt.entry) {
			t.Errorf("ParseAllowance(%q) = %s (%v), want %s", tt.entry, got, err, tt.want)
		}
	}
	if _, err := ParseAllowances([]string{"ok.example", "bad_name"}); err == nil {
		t.Error("ParseAllowances took a bad entry")
	}
}
