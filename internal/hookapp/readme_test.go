package hookapp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/testutil"
)

// readmeRecipe is the README's fenced shell block that signs and sends a
// webhook delivery (the one that sets X-Engrams-Signature).
func readmeRecipe(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(data), "```sh\n")
	for _, b := range blocks[1:] {
		block, _, _ := strings.Cut(b, "```")
		if strings.Contains(block, "X-Engrams-Signature: v1=") {
			return block
		}
	}
	t.Fatal("README.md has no sh block that sends X-Engrams-Signature")
	return ""
}

// TestREADMESignatureRecipe runs the README's openssl/curl recipe against
// this package's verifier: signed with the whole whsec_ secret it verifies,
// signed with the secret less its whsec_ prefix it does not.
func TestREADMESignatureRecipe(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "openssl", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (scripts/install-deps.sh installs it): %v", tool, err)
		}
	}
	recipe := readmeRecipe(t)
	for _, tt := range []struct {
		name, key string
		verifies  bool
	}{
		{"whole secret", secret, true},
		{"secret without whsec_", strings.TrimPrefix(secret, "whsec_"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := New(Deps{Store: fakeStore{}, Sealer: plainSealer{}, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []error
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				_, err := h.Verify(r.Context(), connector.Request{Header: r.Header, Body: body, Slug: strings.TrimPrefix(r.URL.Path, "/v1/hooks/")})
				mu.Lock()
				got = append(got, err)
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", recipe)
			cmd.Env = append(os.Environ(), "URL="+srv.URL+"/v1/hooks/deploy", "SECRET="+tt.key)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the README's recipe failed: %v\n%s", err, out)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("%d deliveries, want 1", len(got))
			}
			if verified := got[0] == nil; verified != tt.verifies {
				t.Errorf("verified %t (%v), want %t", verified, got[0], tt.verifies)
			}
		})
	}
}
