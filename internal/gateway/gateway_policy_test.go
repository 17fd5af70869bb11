package gateway

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/netpolicy"
)

// fixedResolver answers every name with the same addresses.
type fixedResolver []netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

// TestGatewayRefusesBlockedProviders: a base URL at a loopback address,
// or at a name that resolves to one when dialled, is refused with a 403
// that names no address unless the operator allowed it; nothing reaches
// the provider.
func TestGatewayRefusesBlockedProviders(t *testing.T) {
	t.Parallel()
	strict := netpolicy.NewGuard(netpolicy.GuardConfig{})
	rebinding := netpolicy.NewGuard(netpolicy.GuardConfig{Resolver: fixedResolver{netip.MustParseAddr("127.0.0.1")}})
	tests := []struct {
		name      string
		providers Providers
		base      func(up string) string
		ok        bool
	}{
		{"loopback address", strict, func(up string) string { return up }, false},
		{"localhost", strict, func(up string) string { return strings.Replace(up, "127.0.0.1", "localhost", 1) }, false},
		{"a name resolving to loopback", rebinding, func(up string) string {
			return strings.Replace(strings.Replace(up, "http://", "https://", 1), "127.0.0.1", "models.example.com", 1)
		}, false},
		{"loopback allowed", loopback(), func(up string) string { return up }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGatewayEnvWith(t, Config{}, false, false, tt.providers)
			ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", tt.base(g.upTS.URL))
			s := g.session(t, ant)
			resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages",
				map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}, `{}`)
			body := readAll(t, resp)
			if tt.ok {
				if resp.StatusCode != http.StatusOK || len(g.up.got()) != 1 {
					t.Fatalf("answer %d %s, want forwarded", resp.StatusCode, body)
				}
				return
			}
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.upTS.URL, "http://"))
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--allow-model-url") || strings.Contains(body, port) {
				t.Fatalf("answer %d %s, want a 403 naming no address", resp.StatusCode, body)
			}
			if n := len(g.up.got()); n != 0 {
				t.Fatalf("the provider got %d requests", n)
			}
			if !strings.Contains(g.log.String(), "127.0.0.1:"+port) {
				t.Errorf("the log does not say which address was refused:\n%s", g.log.String())
			}
		})
	}
}
