package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/server"
)

// TestServerRefusesPrivateRegistries: `engrams server` refuses to enable
// an image from a registry on 127.0.0.1 or 10.0.0.0/8, saying how to
// allow it, unless its flags allow that registry.
func TestServerRefusesPrivateRegistries(t *testing.T) {
	t.Parallel()
	refs := []string{"127.0.0.1:5000/app:1", "10.1.2.3/team/app:1", "localhost:5000/app:1"}
	for _, allowed := range []bool{false, true} {
		dir := t.TempDir()
		var extra []string
		if allowed {
			extra = []string{"--allow-registry", "127.0.0.1:5000", "--allow-registry", "10.0.0.0/8,localhost"}
		}
		addr := freeAddr(t)
		tokenFile := filepath.Join(dir, "admin-token")
		startCoordinator(t, addr, filepath.Join(dir, "db"), filepath.Join(dir, "server.log"),
			append(extra, "--bootstrap-token-file", tokenFile)...)
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		var creds server.Credentials
		if err := json.Unmarshal(b, &creds); err != nil {
			t.Fatal(err)
		}
		c := client.New("http://"+addr, creds.Token)
		for i, ref := range refs {
			_, err := c.Images().Enable(context.Background(), apiv1.EnableImageRequest{Ref: ref, Name: "img" + string(rune('a'+i))})
			if allowed {
				if err != nil {
					t.Errorf("allowed: enable %s: %v", ref, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "is blocked") && !strings.Contains(err.Error(), "blocked addresses") ||
				!strings.Contains(err.Error(), "--allow-registry") {
				t.Errorf("enable %s: %v, want a refusal naming the range and --allow-registry", ref, err)
			}
		}
	}
}

// TestDevAllowsLoopbackRegistries: `engrams dev` takes a registry on
// 127.0.0.1 or localhost, says at start that it does, and still refuses
// 10.0.0.0/8.
func TestDevAllowsLoopbackRegistries(t *testing.T) {
	t.Parallel()
	p := startDev(t, filepath.Join(t.TempDir(), "data"), "process", "--log-level", "info")
	for _, ref := range []string{"127.0.0.1:5000/app:1", "localhost:5000/other:1"} {
		if _, err := p.c.Images().Enable(context.Background(), apiv1.EnableImageRequest{Ref: ref}); err != nil {
			t.Errorf("dev: enable %s: %v", ref, err)
		}
	}
	if _, err := p.c.Images().Enable(context.Background(), apiv1.EnableImageRequest{Ref: "10.0.0.5/app:1", Name: "private"}); err == nil ||
		!strings.Contains(err.Error(), "private 10.0.0.0/8") {
		t.Errorf("dev: enable from 10.0.0.5: %v, want refused", err)
	}
	b, err := os.ReadFile(p.stderr)
	if err != nil || !strings.Contains(string(b), "dev allows image registries, model base URLs, brokered git hosts and integrations' API URLs on this machine's loopback") {
		t.Errorf("dev's log does not say it allows loopback registries (%v):\n%s", err, b)
	}
}
