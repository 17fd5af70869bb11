package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/clienttest"
)

// TestIdentityLink: `engrams identity link KIND [LOGIN]` asks for a code
// of that kind (GitHub's made for the login named), prints the code on
// stdout and what to say on stderr.
func TestIdentityLink(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []apiv1.LinkIdentityRequest
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.LinkIdentityRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/me/identities" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, `{"error":{"code":"not_found","message":"no such route"}}`, http.StatusNotFound)
			return
		}
		mu.Lock()
		asked = append(asked, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(apiv1.IdentityLink{Code: "ABCD-EFGH-IJKL-MNOP", Say: "say it as " + req.Account})
	}))
	t.Cleanup(ts.Close)
	srv := &clienttest.Server{URL: ts.URL}
	for _, args := range [][]string{{"slack"}, {"linear"}, {"github", "octocat"}} {
		got := run(t, srv, nil, "", append([]string{"identity", "link"}, args...)...)
		if got.code != 0 || got.stdout != "ABCD-EFGH-IJKL-MNOP\n" || !strings.HasPrefix(got.stderr, "say it as") {
			t.Fatalf("identity link %v: %d %q %q", args, got.code, got.stdout, got.stderr)
		}
	}
	if got := run(t, srv, nil, "", "identity", "link"); got.code != 2 {
		t.Fatalf("identity link with no kind: exit %d", got.code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 || asked[0] != (apiv1.LinkIdentityRequest{Kind: "slack"}) || asked[1] != (apiv1.LinkIdentityRequest{Kind: "linear"}) ||
		asked[2] != (apiv1.LinkIdentityRequest{Kind: "github", Account: "octocat"}) {
		t.Fatalf("asked %+v", asked)
	}
}
