package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// TestGatewayRefusesHostWithoutAccess: a host an admin disabled or
// deleted, or whose link's token was revoked, gets nothing through the
// gateway, even for a session still placed on it and live.
func TestGatewayRefusesHostWithoutAccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		revoke func(g *gwEnv) error
	}{
		{"disabled", func(g *gwEnv) error { _, err := g.st.DisableHost(context.Background(), "host-a", true); return err }},
		{"deleted", func(g *gwEnv) error {
			_, err := g.st.DeleteHost(context.Background(), "host-a", time.Now())
			return err
		}},
		{"token revoked", func(g *gwEnv) error { return g.st.RevokeToken(context.Background(), "tok-a", time.Now()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newGatewayEnv(t, Config{}, false, false)
			ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
			s := g.session(t, ant)
			hdr := map[string]string{"X-Api-Key": g.placeholder(t, s.ID, apiv1.SecretAnthropicAPIKey)}
			path := "/" + apiv1.SecretAnthropicAPIKey + "/v1/messages"
			if resp := g.send(t, "host-a", s.ID, http.MethodPost, path, hdr, `{}`); resp.StatusCode != http.StatusOK {
				t.Fatalf("before: %d %s", resp.StatusCode, readAll(t, resp))
			}
			if err := tt.revoke(g); err != nil {
				t.Fatal(err)
			}
			resp := g.send(t, "host-a", s.ID, http.MethodPost, path, hdr, `{}`)
			if body := readAll(t, resp); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("after: %d %s, want 403", resp.StatusCode, body)
			}
			if n := len(g.up.got()); n != 1 {
				t.Fatalf("upstream got %d requests, want only the one before", n)
			}
		})
	}
}
