package integrations

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
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
