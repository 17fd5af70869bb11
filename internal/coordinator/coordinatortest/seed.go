package coordinatortest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

// SeedAgents registers images py (glibc, ready), alp (musl, ready) and
// new (being enabled); harnesses claude-code@2.1.0 (glibc, an Anthropic
// key) and shell@1 (static, no credentials); secrets ant and ant2
// (Anthropic), oai (OpenAI), gh (git, github.com) and gen (generic).
func SeedAgents(t testing.TB, st store.Store, putSecret func(name, kind string, meta apiv1.SecretMeta, value []byte) error) {
	t.Helper()
	ctx := context.Background()
	for _, img := range []domain.Image{
		{ID: "img-py", Org: domain.FirstOrg, Name: "py", Ref: "reg/python:3.12", Digest: "sha256:py", Config: json.RawMessage(`{"libc":"glibc"}`),
			Manifests: json.RawMessage(`{"rootfs":{}}`), BaseID: "base-py"},
		{ID: "img-alp", Org: domain.FirstOrg, Name: "alp", Ref: "reg/alpine:3", Digest: "sha256:alp", Config: json.RawMessage(`{"libc":"musl"}`),
			Manifests: json.RawMessage(`{"rootfs":{}}`), BaseID: "base-alp"},
		{ID: "img-new", Org: domain.FirstOrg, Name: "new", Ref: "reg/new:1"},
	} {
		if err := st.CreateImage(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	claude := guestapi.HarnessDescriptor{Format: 1, Name: "claude-code", Version: "2.1.0", Entrypoint: []string{"bin/claude"},
		Protocol: guestapi.HarnessProtocolClaudeStreamJSON, Models: []string{"sonnet", "opus", guestapi.AnyModel}, Modes: []string{"bypassPermissions", "plan"},
		Credentials: []guestapi.HarnessCredential{{Kind: "anthropic_api_key", Env: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}},
		Hosts:       []string{"api.anthropic.com:443"}, Requires: guestapi.HarnessRequires{Libc: guestapi.LibcGlibc}}
	shell := guestapi.HarnessDescriptor{Format: 1, Name: "shell", Version: "1", Entrypoint: []string{"bin/sh"}, Protocol: guestapi.HarnessProtocolShell,
		Requires: guestapi.HarnessRequires{Libc: guestapi.LibcNone}}
	for _, d := range []guestapi.HarnessDescriptor{claude, shell} {
		desc, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutHarness(ctx, domain.Harness{ID: "h-" + d.Name, Name: d.Name, Version: d.Version, Descriptor: desc,
			Manifest: json.RawMessage(`{"version":2,"chunk_size":4194304,"size":0,"chunks":[]}`), Digest: "sha256:" + d.Name, Builtin: true, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		name, kind string
		meta       apiv1.SecretMeta
	}{
		{"ant", "anthropic_api_key", apiv1.SecretMeta{}}, {"ant2", "anthropic_api_key", apiv1.SecretMeta{}}, {"oai", "openai_api_key", apiv1.SecretMeta{}},
		{"gh", "git_https", apiv1.SecretMeta{Username: "x-access-token", Host: "github.com"}}, {"gen", "generic", apiv1.SecretMeta{}},
	} {
		if err := putSecret(s.name, s.kind, s.meta, []byte("value-of-"+s.name)); err != nil {
			t.Fatal(err)
		}
	}
}
