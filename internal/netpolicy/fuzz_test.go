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
