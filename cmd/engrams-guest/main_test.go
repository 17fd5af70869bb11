package main

import (
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"all transports", []string{"--listen", "unix:/run/g.sock", "--listen", "tcp:127.0.0.1:1", "--listen", "vport:engrams", "--listen", "vsock:1024", "--env", "A=b", "--workdir", "/w"}, ""},
		{"no listener", nil, "at least one --listen"},
		{"unknown transport", []string{"--listen", "udp:1"}, "unknown transport"},
		{"missing address", []string{"--listen", "unix:"}, "want unix:PATH"},
		{"bad vsock port", []string{"--listen", "vsock:x"}, "bad vsock port"},
		{"bad env", []string{"--listen", "unix:/s", "--env", "NOEQUALS"}, "K=V"},
		{"state dir", []string{"--listen", "unix:/s", "--state-dir", "/tmp/x"}, ""},
		{"empty state dir", []string{"--listen", "unix:/s", "--state-dir", ""}, "--state-dir"},
		{"stray args", []string{"--listen", "unix:/s", "extra"}, "unexpected arguments"},
		{"harness flags", []string{"--listen", "unix:/s", "--harness-dir", "/h", "--harness-home", "/root", "--gateway-addr", "127.0.0.1:0"}, ""},
		{"gateway not loopback", []string{"--listen", "unix:/s", "--gateway-addr", "0.0.0.0:4780"}, "not a loopback address"},
		{"gateway without port", []string{"--listen", "unix:/s", "--gateway-addr", "127.0.0.1"}, "--gateway-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("parseFlags(%q) = %v, want %q", tt.args, err, tt.wantErr)
			}
		})
	}
}
