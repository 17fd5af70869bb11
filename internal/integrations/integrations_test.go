package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/secret"
)

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		kind   domain.IntegrationKind
		config string
		want   string // "" accepts; otherwise a part of the error
	}{
		{"empty", domain.IntegrationLinear, ``, ""},
		{"linear with a repo", domain.IntegrationLinear, `{"team":"ENG","repo":"acme/app"}`, ""},
		{"github repos", domain.IntegrationGitHub, `{"repos":["acme/app","acme/web.site"]}`, ""},
		{"not an object", domain.IntegrationGitHub, `[1]`, "must be a JSON object"},
		{"unknown setting", domain.IntegrationSlack, `{"repo":"acme/app"}`, `no setting "repo"`},
		{"repo not owner/name", domain.IntegrationLinear, `{"repo":"app"}`, `repo "app": want a GitHub repository owner/name`},
		{"repo a number", domain.IntegrationLinear, `{"repo":7}`, "repo must be a string"},
		{"repos a string", domain.IntegrationGitHub, `{"repos":"acme/app"}`, "repos must be a list"},
		{"repos with a bad one", domain.IntegrationGitHub, `{"repos":["acme/app","../etc"]}`, `repos "../etc"`},
		{"repo named dot-dot", domain.IntegrationLinear, `{"repo":"acme/.."}`, `repo "acme/.."`},
		{"api_url not http", domain.IntegrationGitHub, `{"api_url":"ftp://x"}`, "want an http(s) URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkConfig(tc.kind, specs[tc.kind], json.RawMessage(tc.config))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkConfig(%s) = %v, want nil", tc.config, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkConfig(%s) = %v, want an error containing %q", tc.config, err, tc.want)
			}
			if !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("checkConfig(%s) = %v, want domain.ErrInvalid", tc.config, err)
			}
		})
	}
}

// TestAPIURLPolicy: an api_url the address policy refuses (loopback,
// private, metadata) is refused when the integration is added, naming the
// flag that allows it; an allowed one is taken.
func TestAPIURLPolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, url string
		allow     []netpolicy.Allowance
		ok        bool
	}{
		{"loopback", "http://127.0.0.1:9000/api/", nil, false},
		{"localhost", "https://localhost/api/", nil, false},
		{"metadata", "http://169.254.169.254/", nil, false},
		{"private", "https://10.1.2.3/graphql", nil, false},
		{"IPv4 in NAT64", "https://[64:ff9b::7f00:1]/", nil, false},
		{"a public name", "https://slack.example.com/api/", nil, true},
		{"loopback allowed", "http://127.0.0.1:9000/api/", netpolicy.LoopbackAllowances(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sealer, err := secret.NewEphemeral()
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(Deps{Store: memStore{}, Sealer: sealer, Hosts: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: c.allow})})
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := json.Marshal(map[string]string{"api_url": c.url})
			_, err = s.Add(t.Context(), domain.FirstOrg, domain.IntegrationLinear, cfg, map[string]string{"api_key": "k", "webhook_secret": "w"})
			if c.ok != (err == nil) || (err != nil && (!errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "--allow-integration-url"))) {
				t.Fatalf("add with api_url %s: %v, want ok %v", c.url, err, c.ok)
			}
		})
	}
}

// memStore keeps nothing: Add's checks come first.
type memStore struct{}

func (memStore) PutIntegration(_ context.Context, in domain.Integration) (domain.Integration, error) {
	return in, nil
}
func (memStore) GetIntegration(context.Context, domain.IntegrationKind) (domain.Integration, error) {
	return domain.Integration{}, domain.ErrNotFound
}
func (memStore) ListIntegrations(context.Context, domain.OrgID) ([]domain.Integration, error) {
	return nil, nil
}
func (memStore) DeleteIntegration(context.Context, domain.OrgID, domain.IntegrationKind) error {
	return nil
}
