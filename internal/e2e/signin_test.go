package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/oidctest"
)

// TestDashboardSignInWithTheProvider (issue 27): `engrams server
// --oidc-issuer` over the mock provider of internal/oidctest;
// web/e2e/signin.mjs signs a member in through the dashboard in Debian's
// chromium (code + PKCE), checks the cookie and the anti-forgery header,
// signs out (the cookie is then refused by the API), and is refused as a
// person who is no member. The audit log has the sign-in and sign-out
// once each, by the member.
func TestDashboardSignInWithTheProvider(t *testing.T) {
	t.Parallel()
	chromium := requireBrowser(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	base := "http://" + addr
	idp := oidctest.New(t, map[string]oidctest.Client{
		"dash": {Secret: "dash-client-secret", RedirectURIs: []string{base + "/v1/auth/oidc/callback"}},
		"cli":  {},
	})
	ada := oidctest.Identity{Subject: "s-ada", Email: "ada@example.com", Verified: true, Name: "Ada"}
	idp.SignIn(&ada)
	secretFile, tokenFile := filepath.Join(dir, "oidc-secret"), filepath.Join(dir, "admin-token")
	if err := os.WriteFile(secretFile, []byte("dash-client-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, addr, filepath.Join(dir, "db"), filepath.Join(dir, "server.log"), "--bootstrap-token-file", tokenFile,
		"--oidc-issuer", idp.URL, "--oidc-client-id", "dash", "--oidc-client-secret-file", secretFile, "--oidc-cli-client-id", "cli")
	admin, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(admin, &creds); err != nil {
		t.Fatalf("read %s: %v", tokenFile, err)
	}
	owner := client.New(base, creds.Token)
	if _, err := owner.People().AddMember(t.Context(), apiv1.AddMemberRequest{Email: ada.Email, Role: apiv1.RoleMember}); err != nil {
		t.Fatal(err)
	}
	// The script makes a stranger the one signed in at the provider.
	stranger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idp.SignIn(&oidctest.Identity{Subject: "s-eve", Email: "eve@example.com", Verified: true})
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(stranger.Close)
	runBrowserScript(t, chromium, "signin.mjs", map[string]string{"baseURL": base, "email": ada.Email, "switchURL": stranger.URL,
		"artifacts": artifactsDir(t, "signin")}, 3*time.Minute)

	log, err := owner.People().Audit(t.Context(), 100, "", false)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, e := range log.Items {
		if e.ActorName == ada.Email {
			counts[e.Action]++
		}
	}
	if counts["signin.oidc"] != 1 || counts["signout"] != 1 || counts["key.create"] != 1 {
		t.Errorf("the member's audit log: %v, want one signin.oidc, key.create and signout", counts)
	}
}
