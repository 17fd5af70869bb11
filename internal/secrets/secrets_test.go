package secrets

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const testKey = "sk-ant-s3cret-value-1234"

func TestCreateSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		req      SecretRequest
		wantMeta apiv1.SecretMeta
	}{
		{"anthropic default base", SecretRequest{Org: domain.FirstOrg, Name: "ant", Kind: "anthropic_api_key", Value: []byte(testKey)},
			apiv1.SecretMeta{BaseURL: "https://api.anthropic.com"}},
		{"openai default base", SecretRequest{Org: domain.FirstOrg, Name: "oai", Kind: "openai_api_key", Value: []byte(testKey)},
			apiv1.SecretMeta{BaseURL: "https://api.openai.com/v1"}},
		{"openai proxy", SecretRequest{Org: domain.FirstOrg, Name: "Proxy.1", Kind: "openai_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "https://10.0.0.5:8080/v1"}},
			apiv1.SecretMeta{BaseURL: "https://10.0.0.5:8080/v1"}},
		{"plain http on loopback", SecretRequest{Org: domain.FirstOrg, Name: "loop1", Kind: "anthropic_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "http://127.0.0.2:8080"}},
			apiv1.SecretMeta{BaseURL: "http://127.0.0.2:8080"}},
		{"plain http on localhost", SecretRequest{Org: domain.FirstOrg, Name: "loop2", Kind: "openai_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "http://localhost:8080/v1"}},
			apiv1.SecretMeta{BaseURL: "http://localhost:8080/v1"}},
		{"plain http on ::1", SecretRequest{Org: domain.FirstOrg, Name: "loop3", Kind: "openai_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "http://[::1]:8080/v1"}},
			apiv1.SecretMeta{BaseURL: "http://[::1]:8080/v1"}},
		{"git host from base url", SecretRequest{Org: domain.FirstOrg, Name: "gh", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Username: "x-access-token", BaseURL: "https://GitHub.com/acme"}},
			apiv1.SecretMeta{Username: "x-access-token", BaseURL: "https://GitHub.com/acme", Host: "github.com"}},
		{"git host", SecretRequest{Org: domain.FirstOrg, Name: "gl", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Host: "gitlab.example.com:8443"}},
			apiv1.SecretMeta{Host: "gitlab.example.com:8443"}},
		{"generic multi-line", SecretRequest{Org: domain.FirstOrg, Name: "pem", Kind: "generic", Value: []byte("-----BEGIN-----\nabc\n-----END-----\n")}, apiv1.SecretMeta{}},
		{"github app", SecretRequest{Org: domain.FirstOrg, Name: "app", Kind: "github_app", Value: appKeyPEM(), Meta: apiv1.SecretMeta{AppID: "Iv23abc", InstallationID: 42}},
			apiv1.SecretMeta{BaseURL: "https://api.github.com", Host: "github.com", AppID: "Iv23abc", InstallationID: 42}},
		{"github enterprise app", SecretRequest{Org: domain.FirstOrg, Name: "ghe", Kind: "github_app", Value: appKeyPEM(), Meta: apiv1.SecretMeta{AppID: "7", InstallationID: 1, BaseURL: "https://ghe.example.com/api/v3"}},
			apiv1.SecretMeta{BaseURL: "https://ghe.example.com/api/v3", Host: "ghe.example.com", AppID: "7", InstallationID: 1}},
	}
	e := newAgentEnv(t, false)
	ctx := context.Background()
	for _, tt := range tests {
		v, err := e.co.Create(ctx, tt.req)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if v.Meta != tt.wantMeta || v.Secret.Kind != tt.req.Kind || v.Secret.Name != tt.req.Name || v.Secret.Sealed != nil {
			t.Errorf("%s: %+v, want meta %+v", tt.name, v, tt.wantMeta)
		}
		s, plain, err := e.co.Open(ctx, v.Secret.ID)
		if err != nil || string(plain) != string(tt.req.Value) || s.Name != tt.req.Name {
			t.Errorf("%s: open: %+v %q %v", tt.name, s, plain, err)
		}
		// The fake sealer prefixes the associated data: the row's id.
		if raw, _ := e.st.GetSecret(ctx, v.Secret.ID); !strings.HasPrefix(string(raw.Sealed), "secret:"+string(v.Secret.ID)) {
			t.Errorf("%s: sealed as %q, without the row id as associated data", tt.name, raw.Sealed)
		}
	}
	list, err := e.co.List(ctx, domain.FirstOrg)
	if err != nil || len(list) != len(tests) || list[0].Secret.Name != "Proxy.1" || list[0].Secret.Sealed != nil {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func TestCreateSecretRefuses(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	ctx := context.Background()
	if _, err := e.co.Create(ctx, SecretRequest{Org: domain.FirstOrg, Name: "taken", Kind: "generic", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  SecretRequest
		want []string
	}{
		{"bad name", SecretRequest{Org: domain.FirstOrg, Name: "-x", Kind: "generic", Value: []byte(testKey)}, []string{`name "-x"`}},
		{"reserved name", SecretRequest{Org: domain.FirstOrg, Name: "Engrams-gateway-key", Kind: "generic", Value: []byte(testKey)}, []string{"reserved for engrams"}},
		{"bad kind", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "aws", Value: []byte(testKey)}, []string{`kind "aws": want one of anthropic_api_key, openai_api_key, git_https, github_app, generic`}},
		{"empty", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "generic"}, []string{"the value is empty"}},
		{"newline in a key", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "anthropic_api_key", Value: []byte(testKey + "\n")}, []string{"line breaks"}},
		{"too big", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "generic", Value: make([]byte, 17<<10)}, []string{"at most 16384"}},
		{"bad base url", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "anthropic_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "ftp://x"}}, []string{"want an absolute https URL"}},
		{"plain http off loopback", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "openai_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "http://10.0.0.5:8080/v1"}}, []string{"want https; plain http only to this machine"}},
		{"plain http to a name", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "anthropic_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "http://localhost.example.com"}}, []string{"want https"}},
		{"git without host", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Username: "bot"}}, []string{"a git_https secret needs the git host it is for"}},
		{"login in base url", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "openai_api_key", Value: []byte(testKey), Meta: apiv1.SecretMeta{BaseURL: "https://u:p@x.example"}}, []string{"carries a login"}},
		{"bad host", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Host: "GitHub.com"}}, []string{"not a lower-case DNS label"}},
		{"bad username", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Username: "a b"}}, []string{`username "a b"`}},
		{"all at once", SecretRequest{Org: domain.FirstOrg, Name: "", Kind: "", Value: nil}, []string{`name ""`, `kind ""`, "the value is empty"}},
		{"app key not pem", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "github_app", Value: []byte(testKey), Meta: apiv1.SecretMeta{AppID: "1", InstallationID: 2}},
			[]string{"the app's private key", "not PEM"}},
		{"app without ids", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "github_app", Value: appKeyPEM(), Meta: apiv1.SecretMeta{Username: "bot"}},
			[]string{`app id ""`, "installation_id: want", "username: a github_app secret"}},
		{"app ids on a git login", SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "git_https", Value: []byte(testKey), Meta: apiv1.SecretMeta{Host: "github.com", AppID: "1"}},
			[]string{"app_id and installation_id are for github_app secrets"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := e.co.Create(ctx, tt.req)
			if !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("%v, want domain.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}
	if _, err := e.co.Create(ctx, SecretRequest{Org: domain.FirstOrg, Name: "taken", Kind: "generic", Value: []byte("v")}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a taken name: %v, want a conflict", err)
	}
	noKey := newAgentEnv(t, false)
	noKey.co.secrets = nil
	if _, err := noKey.co.Create(ctx, SecretRequest{Org: domain.FirstOrg, Name: "k", Kind: "generic", Value: []byte("v")}); !errors.Is(err, domain.ErrInvalid) ||
		!strings.Contains(err.Error(), "keeps no secrets") {
		t.Errorf("without a secrets key: %v", err)
	}
}

func TestDeleteSecret(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, false)
	ctx := context.Background()
	v, err := e.co.Create(ctx, SecretRequest{Org: domain.FirstOrg, Name: "gen", Kind: "generic", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	internal, err := e.co.putSealedSecret(ctx, "", "gateway_key", "engrams-gateway-key", []byte("k"), apiv1.SecretMeta{})
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := e.co.List(ctx, domain.FirstOrg); len(list) != 1 || list[0].Secret.Name != "gen" {
		t.Errorf("list shows engrams's own secrets: %+v", list)
	}
	if _, err := e.co.Delete(ctx, domain.FirstOrg, "engrams-gateway-key"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting engrams's own secret: %v, want not found", err)
	}
	if _, plain, err := e.co.Open(ctx, internal.ID); err != nil || string(plain) != "k" {
		t.Errorf("open the internal secret: %q %v", plain, err)
	}
	d, err := e.co.Delete(ctx, domain.FirstOrg, "gen")
	if err != nil || d.Secret.DeletedAt.IsZero() {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, _, err := e.co.Open(ctx, v.Secret.ID); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("open a deleted secret: %v", err)
	}
	if again, err := e.co.Delete(ctx, domain.FirstOrg, string(v.Secret.ID)); err != nil || !again.Secret.DeletedAt.Equal(d.Secret.DeletedAt) {
		t.Errorf("delete again by id: %+v %v", again, err)
	}
	if _, err := e.co.Delete(ctx, domain.FirstOrg, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("delete unknown: %v", err)
	}
	if _, err := e.co.Create(ctx, SecretRequest{Org: domain.FirstOrg, Name: "gen", Kind: "generic", Value: []byte("v2")}); err != nil {
		t.Errorf("the name is free again: %v", err)
	}
}

// appKeyPEM is a GitHub App private key (made once: it is slow).
var appKeyPEM = sync.OnceValue(func() []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
})

// agentEnv is a vault over SQLite with a fake sealer.
type agentEnv struct {
	st store.Store
	co *Vault
}

// newAgentEnv returns a vault; sealed says whether it has a sealer.
func newAgentEnv(t *testing.T, _ bool) *agentEnv {
	t.Helper()
	st := coordinatortest.NewStore(t)
	v, err := New(Deps{Store: st, Sealer: coordinatortest.Sealer{}})
	if err != nil {
		t.Fatal(err)
	}
	return &agentEnv{st: st, co: v}
}
