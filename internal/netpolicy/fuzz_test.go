package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// FuzzCompile: whatever an entry is, parsing and compiling it neither
// panics nor lets a blocked address through; an accepted name entry
// allows its own name on its ports and nothing on other names' labels.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:8443", "1.2.3.4", "[::1]:80", "::ffff:127.0.0.1",
		"a.b-c.d", "*.", "x:0", "[2606:4700::1]:443", "fe80::1%eth0", "10.0.0.0/8", "Registry.LAN:5000", "é.com"} {
		f.Add(s, "www.example.com", uint16(443))
	}
	f.Fuzz(func(t *testing.T, entry, name string, port uint16) {
		pat, perr := ParsePattern(entry)
		pol, cerr := Compile([]string{entry})
		switch {
		case perr != nil && cerr == nil:
			t.Fatalf("Compile took %q, which ParsePattern refuses: %v", entry, perr)
		case perr == nil && cerr != nil && !errors.Is(cerr, ErrBlocked):
			t.Fatalf("Compile refused %q for a reason ParsePattern did not see: %v", entry, cerr)
		}
		if _, err := ParseAllowance(entry); err == nil && perr != nil && !strings.Contains(entry, "/") && strings.ToLower(strings.TrimSpace(entry)) == entry {
			t.Fatalf("ParseAllowance took %q, which ParsePattern refuses", entry)
		}
		if cerr != nil {
			return
		}
		if ok, reason := pol.AllowName(name, port); ok {
			if a, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
				if _, blocked := BlockedRange(a); blocked {
					t.Fatalf("%q allowed blocked address %q:%d (%s)", entry, name, port, reason)
				}
			} else if n, _ := normalizeName(name); !pat.matchesName(n) {
				t.Fatalf("%q allowed %q, which it does not name (%s)", entry, name, reason)
			}
		}
		if pat.Name != "" && !pat.Wildcard {
			want := pat.Port
			if want == 0 {
				want = 443
			}
			if ok, reason := pol.AllowName(pat.Name, want); !ok {
				t.Fatalf("%q does not allow its own name on port %d: %s", entry, want, reason)
			}
			if ok, _ := pol.AllowName("x"+pat.Name, want); ok {
				t.Fatalf("%q allows x%s", entry, pat.Name)
			}
		}
		if pat.Wildcard {
			if ok, _ := pol.AllowName(pat.Name, 443); ok {
				t.Fatalf("%q allows the bare suffix", entry)
			}
		}
	})
}

// FuzzOwnAddressForms: whatever the host's IPv4 address and the other
// bits of an IPv6 form carrying it, no form (mapped, SIIT, NAT64, 6to4,
// Teredo) is let through, and none reaches an own port even where an
// allowance lifts the address.
func FuzzOwnAddressForms(f *testing.F) {
	f.Add([]byte{203, 0, 113, 7}, []byte{0x41, 0x36, 0xe3, 0x78, 0x80, 0, 0x63, 0xbf}, uint16(443))
	f.Add([]byte{8, 8, 8, 8}, []byte{}, uint16(7700))
	f.Add([]byte{127, 0, 0, 1}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, uint16(1))
	f.Fuzz(func(t *testing.T, v4b, rest []byte, port uint16) {
		if len(v4b) < 4 || port == 0 {
			return
		}
		v4 := [4]byte(v4b[:4])
		own := netip.AddrFrom4(v4)
		forms := []netip.Addr{own}
		mapped := [16]byte{10: 0xff, 11: 0xff}
		copy(mapped[12:], v4[:])
		siit := [16]byte{8: 0xff, 9: 0xff}
		copy(siit[12:], v4[:])
		nat64 := [16]byte{1: 0x64, 2: 0xff, 3: 0x9b}
		copy(nat64[12:], v4[:])
		sixto4 := [16]byte{0: 0x20, 1: 0x02}
		copy(sixto4[6:], rest)
		copy(sixto4[2:6], v4[:])
		teredo := [16]byte{0: 0x20, 1: 0x01}
		copy(teredo[4:12], rest)
		for i, b := range v4 {
			teredo[12+i] = b ^ 0xff
		}
		for _, b := range [][16]byte{mapped, siit, nat64, sixto4, teredo} {
			forms = append(forms, netip.AddrFrom16(b))
		}
		strict := NewGuard(GuardConfig{Blocked: []netip.Prefix{netip.PrefixFrom(own, 32)}, BlockedPorts: []uint16{port}})
		lifted := NewGuard(GuardConfig{Blocked: []netip.Prefix{netip.PrefixFrom(own, 32)}, BlockedPorts: []uint16{port},
			Allow: []Allowance{{Prefix: netip.PrefixFrom(own, 32)}}})
		other := port + 1
		if other == 0 {
			other = 1
		}
		for _, a := range forms {
			if err := strict.CheckAddr(netip.AddrPortFrom(a, other)); !errors.Is(err, ErrBlocked) {
				t.Fatalf("%s (a form of the host's %s) on port %d: %v, want refused", a, own, other, err)
			}
			if err := lifted.CheckAddr(netip.AddrPortFrom(a, port)); !errors.Is(err, ErrBlocked) {
				t.Fatalf("%s (a form of the host's %s) on its own port %d under an allowance: %v, want refused", a, own, port, err)
			}
		}
	})
}
