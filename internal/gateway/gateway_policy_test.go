package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/netpolicy"
)

// TestGatewayForwardsOnlyHarnessEndpoints: per kind, the endpoints the
// harnesses call pass (with or without /v1, with a query); anything else
// is refused with a 403 in the provider's error shape and never sent.
func TestGatewayForwardsOnlyHarnessEndpoints(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	oai := g.secret(t, apiv1.SecretOpenAIAPIKey, "oai", "sk-oai-REAL", g.upTS.URL+"/v1")
	s := g.session(t, ant, oai)
	tests := []struct {
		kind, method, path string
		ok                 bool
	}{
		{ant.Kind, http.MethodPost, "/v1/messages?beta=true", true},
		{ant.Kind, http.MethodPost, "/v1/messages/count_tokens?beta=true", true},
		{ant.Kind, http.MethodGet, "/v1/models", true},
		{ant.Kind, http.MethodGet, "/v1/models/claude-sonnet-4", true},
		{ant.Kind, http.MethodPost, "/messages", true},
		{ant.Kind, http.MethodGet, "/v1/messages", false},
		{ant.Kind, http.MethodPost, "/v1/messages/batches", false},
		{ant.Kind, http.MethodPost, "/v1/files", false},
		{ant.Kind, http.MethodPost, "/v1/complete", false},
		{ant.Kind, http.MethodDelete, "/v1/models/x", false},
		{ant.Kind, http.MethodGet, "/v1/models/a/b", false},
		{ant.Kind, http.MethodGet, "/v1/models/", false},
		{ant.Kind, http.MethodPost, "/v1/responses", false},
		{ant.Kind, http.MethodPost, "/v1/v1/messages", false},
		{ant.Kind, http.MethodPost, "/admin/v1/messages", false},
		{oai.Kind, http.MethodPost, "/responses", true},
		{oai.Kind, http.MethodPost, "/responses/compact", true},
		{oai.Kind, http.MethodPost, "/chat/completions", true},
		{oai.Kind, http.MethodPost, "/v1/chat/completions", true},
		{oai.Kind, http.MethodGet, "/models?client_version=0.171.0", true},
		{oai.Kind, http.MethodGet, "/models/gpt-5", true},
		{oai.Kind, http.MethodGet, "/responses", false},
		{oai.Kind, http.MethodGet, "/responses/resp_123", false},
		{oai.Kind, http.MethodPost, "/embeddings", false},
		{oai.Kind, http.MethodPost, "/files", false},
		{oai.Kind, http.MethodPost, "/messages", false},
		{oai.Kind, http.MethodPost, "/organization/api_keys", false},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.method+" "+tt.path, func(t *testing.T) {
			before := len(g.up.got())
			ph := g.placeholder(t, s.ID, tt.kind)
			hdr := map[string]string{"X-Api-Key": ph}
			if tt.kind == oai.Kind {
				hdr = map[string]string{"Authorization": "Bearer " + ph}
			}
			resp := g.send(t, "host-a", s.ID, tt.method, "/"+tt.kind+tt.path, hdr, "")
			body := readAll(t, resp)
			sent := len(g.up.got()) - before
			if tt.ok {
				if resp.StatusCode != http.StatusOK || sent != 1 {
					t.Fatalf("answer %d %s, %d sent upstream; want forwarded", resp.StatusCode, body, sent)
				}
				return
			}
			if resp.StatusCode != http.StatusForbidden || sent != 0 || !strings.Contains(body, "does not forward") {
				t.Fatalf("answer %d %s, %d sent upstream; want a 403 refusal", resp.StatusCode, body, sent)
			}
			var shape map[string]any
			if err := json.Unmarshal([]byte(body), &shape); err != nil || shape["error"] == nil {
				t.Fatalf("refusal %s is not in the provider's error shape", body)
			}
		})
	}
	if resp := g.send(t, "host-a", s.ID, http.MethodHead, "/"+ant.Kind, nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("probe of the base URL answered %d", resp.StatusCode)
	}
}

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
