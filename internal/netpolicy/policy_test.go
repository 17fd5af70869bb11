package netpolicy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry   string
		want    string // %+v of the fields, or the error's text part
		wantErr bool
	}{
		{"example.com", "name=example.com wild=false addr=invalid IP port=0", false},
		{"example.com:8443", "name=example.com wild=false addr=invalid IP port=8443", false},
		{"*.example.com", "name=example.com wild=true addr=invalid IP port=0", false},
		{"*.example.com:22", "name=example.com wild=true addr=invalid IP port=22", false},
		{"1.2.3.4", "name= wild=false addr=1.2.3.4 port=0", false},
		{"1.2.3.4:80", "name= wild=false addr=1.2.3.4 port=80", false},
		{"::ffff:1.2.3.4", "name= wild=false addr=1.2.3.4 port=0", false},
		{"[2606:4700::1]:443", "name= wild=false addr=2606:4700::1 port=443", false},
		{"2606:4700::1", "name= wild=false addr=2606:4700::1 port=0", false},
		{"x", "name=x wild=false addr=invalid IP port=0", false},
		{"", "want a host name of 1 to 253 bytes", true},
		{"Example.com", `label "Example" is not a lower-case DNS label`, true},
		{"example.com.", `label "" is not`, true},
		{"*", `label "*"`, true},
		{"*.", "want a host name", true},
		{"a.*.com", `label "*"`, true},
		{"*.*.com", `label "*"`, true},
		{"-a.com", "not a lower-case DNS label", true},
		{"a-.com", "not a lower-case DNS label", true},
		{"a_b.com", "not a lower-case DNS label", true},
		{"ex ample.com", "not a lower-case DNS label", true},
		{strings.Repeat("a", 64) + ".com", "not a lower-case DNS label", true},
		{strings.Repeat("a.", 127) + "aa", "1 to 253 bytes", true},
		{"example.com:0", `port "0" is not 1 to 65535`, true},
		{"example.com:65536", "is not 1 to 65535", true},
		{"example.com:080", "is not 1 to 65535", true},
		{"example.com:http", "is not 1 to 65535", true},
		{"example.com:", "is not 1 to 65535", true},
		{"[::1]", "want host or host:port", true},
		{"a:b:c", "want host or host:port", true},
		{"\u212aelvin.com", "not a lower-case DNS label", true},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			t.Parallel()
			p, err := ParsePattern(tt.entry)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("ParsePattern(%q) = %+v, %v; want an error with %q", tt.entry, p, err, tt.want)
				}
				return
			}
			got := fmt.Sprintf("name=%s wild=%v addr=%s port=%d", p.Name, p.Wildcard, p.Addr, p.Port)
			if err != nil || got != tt.want || p.String() != tt.entry {
				t.Fatalf("ParsePattern(%q) = %s (%q), %v; want %s", tt.entry, got, p.String(), err, tt.want)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"127.0.0.1", "10.0.0.5:443", "[::1]:80", "169.254.169.254", "::ffff:192.168.0.1", "fe80::1%eth0", "0.0.0.0"} {
		_, err := Compile([]string{"example.com", bad})
		if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "entry 1") {
			t.Errorf("Compile with %q: %v, want ErrBlocked naming entry 1", bad, err)
		}
	}
	if _, err := Compile([]string{"ok.com", "Bad"}); err == nil || errors.Is(err, ErrBlocked) {
		t.Errorf("Compile of a bad name: %v, want a syntax error", err)
	}
	if _, err := Compile(make([]string, MaxEntries+1)); err == nil {
		t.Error("Compile took more than MaxEntries entries")
	}
	p, err := Compile([]string{"a.com", "a.com", "8.8.8.8"})
	if err != nil || strings.Join(p.Entries(), ",") != "a.com,a.com,8.8.8.8" {
		t.Fatalf("Compile: %v, %v", p, err)
	}
}

func TestAllowName(t *testing.T) {
	t.Parallel()
	p, err := Compile([]string{"example.com", "api.example.org:8443", "*.example.net", "*.svc.example.io:22", "8.8.8.8", "[2606:4700::1111]:853"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		port   uint16
		ok     bool
		reason string
	}{
		{"example.com", 443, true, `allowed by "example.com"`},
		{"example.com", 80, true, `"example.com"`},
		{"example.com", 22, false, "port 22 of example.com is not allowed"},
		{"example.com", 0, true, `"example.com"`}, // on some port
		{"api.example.org", 0, true, `"api.example.org:8443"`},
		{"x.svc.example.io", 0, true, `"*.svc.example.io:22"`},
		{"www.example.com", 0, false, "not in the allowlist"},
		{"8.8.8.8", 0, true, `"8.8.8.8"`},
		{"127.0.0.1", 0, false, "loopback"},
		{"EXAMPLE.Com", 443, true, `"example.com"`},
		{"example.com.", 443, true, `"example.com"`},
		{"example.com..", 443, false, "not a valid host name"},
		{"www.example.com", 443, false, "not in the allowlist"},
		{"evil-example.com", 443, false, "not in the allowlist"},
		{"example.com.evil.org", 443, false, "not in the allowlist"},
		{"api.example.org", 8443, true, `"api.example.org:8443"`},
		{"api.example.org", 443, false, "port 443 of api.example.org"},
		{"a.example.net", 443, true, `"*.example.net"`},
		{"a.b.example.net", 80, true, `"*.example.net"`},
		{"A.Example.NET.", 443, true, `"*.example.net"`},
		{"example.net", 443, false, "not in the allowlist"},
		{"evil-example.net", 443, false, "not in the allowlist"},
		{"aexample.net", 443, false, "not in the allowlist"},
		{".example.net", 443, false, "not a valid host name"},
		{"a.example.net", 8080, false, "port 8080"},
		{"x.svc.example.io", 22, true, `"*.svc.example.io:22"`},
		{"x.svc.example.io", 443, false, "port 443"},
		{"8.8.8.8", 443, true, `"8.8.8.8"`},
		{"::ffff:8.8.8.8", 80, true, `"8.8.8.8"`},
		{"8.8.8.8", 53, false, "not in the allowlist"},
		{"8.8.4.4", 443, false, "not in the allowlist"},
		{"[2606:4700::1111]", 853, true, "2606:4700::1111"},
		{"2606:4700::1111", 443, false, "not in the allowlist"},
		{"127.0.0.1", 443, false, "loopback"},
		{"[::1]", 443, false, "loopback"},
		{"::ffff:127.0.0.1", 443, false, "loopback"},
		{"169.254.169.254", 80, false, "link-local"},
		{"", 443, false, "not a valid host name"},
		{"\u212a.example.net", 443, false, "not a valid host name"},
		{"ex ample.com", 443, false, "not a valid host name"},
		{strings.Repeat("a", 300), 443, false, "not a valid host name"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s:%d", tt.name, tt.port), func(t *testing.T) {
			t.Parallel()
			ok, reason := p.AllowName(tt.name, tt.port)
			if ok != tt.ok || !strings.Contains(reason, tt.reason) {
				t.Errorf("AllowName(%q, %d) = %v, %q; want %v with %q", tt.name, tt.port, ok, reason, tt.ok, tt.reason)
			}
		})
	}
	empty, _ := Compile(nil)
	if ok, _ := empty.AllowName("example.com", 443); ok {
		t.Error("an empty policy allowed a name")
	}
}

// TestCheckEntry: CheckEntry refuses what Compile refuses, one entry at a
// time, naming the entry as written and saying it once.
func TestCheckEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry   string
		blocked bool
		want    string // "" = accepted
	}{
		{"example.com", false, ""},
		{"*.example.com:8443", false, ""},
		{"8.8.8.8:53", false, ""},
		{"[2606:4700::1111]:853", false, ""},
		{"127.0.0.1:80", true, "127.0.0.1:80 is blocked: loopback 127.0.0.0/8 (never reachable, whatever the allowlist says)"},
		{"[::ffff:127.0.0.1]:80", true, "[::ffff:127.0.0.1]:80 is blocked: loopback 127.0.0.0/8"},
		{"10.1.2.3", true, "10.1.2.3 is blocked: private 10.0.0.0/8"},
		{"192.168.1.1:8080", true, "192.168.1.1:8080 is blocked: private 192.168.0.0/16"},
		{"169.254.169.254", true, "169.254.169.254 is blocked: link-local (cloud metadata)"},
		{"[::1]:443", true, "[::1]:443 is blocked: loopback ::1/128"},
		{"0.0.0.0:80", true, "0.0.0.0:80 is blocked: the unspecified address"},
		{"Example.com", false, `"Example.com": label "Example" is not a lower-case DNS label`},
		{"host:0", false, `"host:0": port "0" is not 1 to 65535`},
	}
	for _, tt := range tests {
		err := CheckEntry(tt.entry)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckEntry(%q): %v, want nil", tt.entry, err)
		case tt.want == "":
		case err == nil || !strings.HasPrefix(err.Error(), tt.want) || errors.Is(err, ErrBlocked) != tt.blocked:
			t.Errorf("CheckEntry(%q): %v (blocked %v), want %q (blocked %v)", tt.entry, err, errors.Is(err, ErrBlocked), tt.want, tt.blocked)
		case strings.Count(err.Error(), tt.entry) != 1:
			t.Errorf("CheckEntry(%q): %v names the entry %d times, want once", tt.entry, err, strings.Count(err.Error(), tt.entry))
		}
		_, cerr := Compile([]string{tt.entry})
		if (cerr == nil) != (err == nil) {
			t.Errorf("CheckEntry(%q) = %v but Compile = %v: the two checks differ", tt.entry, err, cerr)
		}
	}
}
