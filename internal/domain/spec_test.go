package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

func TestBrokeredRepoPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url, want string
		ok        bool
	}{
		{"https://github.com/acme/app.git", "/acme/app", true},
		{"https://github.com/acme/app", "/acme/app", true},
		{"https://git.test:8443/group/sub/app.git/", "/group/sub/app", true},
		{"https://git.test/a%20b/app", "", false},
		{"https://git.test/", "", false},
		{"https://git.test", "", false},
		{"https://git.test/acme//app", "", false},
		{"https://git.test/acme/../app", "", false},
		{"https://git.test/acme/%2e%2e/app", "", false},
		{"https://git.test/acme%2Fapp", "", false},
	} {
		got, ok := domain.BrokeredRepoPath(tt.url)
		if got != tt.want || ok != tt.ok {
			t.Errorf("BrokeredRepoPath(%q) = %q, %v; want %q, %v", tt.url, got, ok, tt.want, tt.ok)
		}
	}
	if n := (domain.RepoAccess{Path: "/acme/app"}).Name(); n != "app" {
		t.Errorf("Name = %q", n)
	}
}

// TestOldBrokeredGrantAllowsNothing: a session row written before grants
// recorded their repositories decodes, with no access (the broker then
// refuses every request on it).
func TestOldBrokeredGrantAllowsNothing(t *testing.T) {
	t.Parallel()
	var spec domain.SessionSpec
	old := `{"memory_mib":512,"brokered":[{"host":"github.com:443","secret_id":"sec-1","repos":["app"]}]}`
	if err := json.Unmarshal([]byte(old), &spec); err != nil {
		t.Fatal(err)
	}
	g, ok := spec.BrokeredGrant("github.com:443")
	if !ok || g.SecretID != "sec-1" || len(g.Access) != 0 {
		t.Fatalf("decoded %+v %v, want the grant with no access", g, ok)
	}
}
