package main

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/netpolicy"
)

// TestAddressPolicyFlags: `engrams server` refuses loopback and private
// registries and model URLs unless the flags name them; dev allows
// loopback; neither reaches its own ports.
func TestAddressPolicyFlags(t *testing.T) {
	t.Parallel()
	type check struct {
		models     bool // the model guard, else the registry one
		host       string
		port       uint16
		wantReason string // "" allowed
	}
	tests := []struct {
		name   string
		args   []string
		dev    bool
		checks []check
	}{
		{"server default", nil, false, []check{
			{false, "127.0.0.1", 5000, "loopback"}, {false, "localhost", 5000, "loopback"}, {false, "10.0.0.5", 443, "private"},
			{true, "127.0.0.1", 8080, "loopback"}, {false, "registry.example.com", 443, ""}, {true, "8.8.8.8", 443, ""},
		}},
		{"server with allowances", []string{"--allow-registry", "127.0.0.1:5000", "--allow-registry=10.0.0.0/8,registry.lan",
			"--allow-model-url", "http://192.168.1.7:8080/v1", "--allow-model-url", "https://models.lan"}, false, []check{
			{false, "127.0.0.1", 5000, ""}, {false, "127.0.0.1", 5001, "loopback"}, {false, "10.9.8.7", 443, ""},
			{true, "10.9.8.7", 443, "private"}, {true, "192.168.1.7", 8080, ""}, {true, "192.168.1.7", 8081, "private"},
			{false, "192.168.1.7", 8080, "private"},
		}},
		{"dev", nil, true, []check{
			{false, "127.0.0.1", 5000, ""}, {false, "localhost", 5000, ""}, {false, "[::1]", 5000, ""}, {true, "127.0.0.1", 8080, ""},
			{false, "127.0.0.1", 7700, "own services"}, {true, "localhost", 7700, "own services"}, {false, "10.0.0.5", 443, "private"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f policyFlags
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			p, err := f.guards(tt.dev, []uint16{7700}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.checks {
				g := p.registries
				if c.models {
					g = p.models
				}
				err := g.CheckHost(c.host, c.port)
				if (err == nil) != (c.wantReason == "") || (err != nil && (!errors.Is(err, netpolicy.ErrBlocked) || !strings.Contains(err.Error(), c.wantReason))) {
					t.Errorf("models=%v %s:%d: %v, want %q", c.models, c.host, c.port, err, c.wantReason)
				}
			}
		})
	}
	for _, bad := range [][]string{{"--allow-registry", "bad_host"}, {"--allow-model-url", "ftp://x"}, {"--allow-model-url", "10.0.0.0/33"}} {
		var f policyFlags
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := f.guards(false, nil, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
}

func TestAllowFlagsFromEnvironment(t *testing.T) {
	t.Setenv("ENGRAMS_ALLOW_REGISTRY", " 127.0.0.1:5000 ,, 10.0.0.0/8")
	var f policyFlags
	f.register(pflag.NewFlagSet("x", pflag.ContinueOnError))
	if !slices.Equal(f.allowRegistry, []string{"127.0.0.1:5000", "10.0.0.0/8"}) || f.allowModelURL != nil {
		t.Fatalf("from the environment: %q %q", f.allowRegistry, f.allowModelURL)
	}
}

// TestIntegrationURLFlag: integrations' API URLs on loopback or private
// addresses are refused by `engrams server` unless --allow-integration-url
// names them; dev allows loopback.
func TestIntegrationURLFlag(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    []string
		dev     bool
		host    string
		port    uint16
		allowed bool
	}{
		{nil, false, "127.0.0.1", 9000, false},
		{nil, false, "169.254.169.254", 80, false},
		{nil, false, "slack.com", 443, true},
		{[]string{"--allow-integration-url", "http://127.0.0.1:9000/api/"}, false, "127.0.0.1", 9000, true},
		{[]string{"--allow-integration-url", "http://127.0.0.1:9000/api/"}, false, "127.0.0.1", 9001, false},
		{[]string{"--allow-integration-url=10.0.0.0/8"}, false, "10.1.2.3", 443, true},
		{nil, true, "127.0.0.1", 9000, true},
	} {
		var f policyFlags
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		p, err := f.guards(tt.dev, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.integrations.CheckHost(tt.host, tt.port); (err == nil) != tt.allowed {
			t.Errorf("%v dev=%v %s:%d: %v, want allowed %v", tt.args, tt.dev, tt.host, tt.port, err, tt.allowed)
		}
	}
}
