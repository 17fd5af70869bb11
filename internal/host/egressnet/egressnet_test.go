package egressnet

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/netpolicy"
)

func TestPresent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"93.184.216.34", "93.184.216.34"}, // public: the guest routes it to the proxy itself
		{"127.0.0.1", standIn.String()},    // loopback: the guest would reach its own
		{"10.0.2.2", standIn.String()},     // the guest's own subnet
		{"10.0.2.200", standIn.String()},
		{"10.0.3.1", "10.0.3.1"}, // routed through the gateway
		{"0.0.0.0", standIn.String()},
	} {
		if got := present(netip.MustParseAddr(tt.in)); got.String() != tt.want {
			t.Errorf("present(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestPolicyPorts(t *testing.T) {
	t.Parallel()
	p, err := netpolicy.Compile([]string{"pypi.org", "*.github.com:8443", "example.com:8443", "a.test:22"})
	if err != nil {
		t.Fatal(err)
	}
	got := policyPorts(p)
	slices.Sort(got)
	if want := []uint16{22, 80, 443, 8443}; !slices.Equal(got, want) {
		t.Errorf("ports %v, want %v", got, want)
	}
}

func TestAnswerCheck(t *testing.T) {
	t.Parallel()
	allow, err := netpolicy.ParseAllowances([]string{"127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	g := netpolicy.NewGuard(netpolicy.GuardConfig{Allow: allow, Blocked: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}})
	tests := []struct {
		addr  string
		ports []uint16
		ok    bool
	}{
		{"93.184.216.34:443", nil, true},
		{"127.0.0.1:443", nil, false},
		{"127.0.0.1:443", []uint16{8080}, true}, // the policy names the allowed port
		{"127.0.0.1:443", []uint16{9090}, false},
		{"10.0.0.5:443", []uint16{8080}, false},
		// The host's own address, in any form, is never answered.
		{"203.0.113.7:443", []uint16{80}, false},
		{"[64:ff9b::cb00:7107]:443", []uint16{80}, false},
		{"[2002:cb00:7107::1]:443", []uint16{80}, false},
		{"[2001:0:4136:e378:8000:63bf:34ff:8ef8]:443", []uint16{80}, false},
		{"[64:ff9b::cb00:7108]:443", []uint16{80}, true},
	}
	for _, tt := range tests {
		err := answerCheck{guard: g, ports: tt.ports}.CheckAddr(netip.MustParseAddrPort(tt.addr))
		if (err == nil) != tt.ok {
			t.Errorf("%s with ports %v: %v, want ok=%v", tt.addr, tt.ports, err, tt.ok)
		}
	}
}
