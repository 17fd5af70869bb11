package tasks

import (
	"context"
	"maps"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// fakeBrokers names each placeholder after its session and host.
type fakeBrokers struct{}

func (fakeBrokers) CACert(context.Context) ([]byte, error) { return []byte("ca"), nil }
func (fakeBrokers) Placeholder(_ context.Context, sid domain.SessionID, hostPort string) (string, error) {
	return "ph-" + string(sid) + "-" + hostPort, nil
}

func TestTokenEnvNamesEachHostsPlaceholderAsGhReadsIt(t *testing.T) {
	t.Parallel()
	grant := func(hosts ...string) []domain.BrokeredGrant {
		var gs []domain.BrokeredGrant
		for _, h := range hosts {
			gs = append(gs, domain.BrokeredGrant{Host: h, SecretID: "sec-1"})
		}
		return gs
	}
	for _, tt := range []struct {
		name  string
		spec  domain.SessionSpec
		want  map[string]string
		brokr Brokers
	}{
		{"nothing brokered", domain.SessionSpec{}, nil, fakeBrokers{}},
		{"no broker", domain.SessionSpec{Brokered: grant(githubHost)}, nil, nil},
		{"github.com and its API host", domain.SessionSpec{Brokered: grant(githubHost, githubAPIHost)},
			map[string]string{"GH_TOKEN": "ph-s1-github.com:443", "GITHUB_TOKEN": "ph-s1-github.com:443"}, fakeBrokers{}},
		{"an enterprise host, only the first", domain.SessionSpec{Brokered: grant("git.test:8443", "second.test:443")},
			map[string]string{"GH_ENTERPRISE_TOKEN": "ph-s1-git.test:8443", "GITHUB_ENTERPRISE_TOKEN": "ph-s1-git.test:8443", "GH_HOST": "git.test:8443"},
			fakeBrokers{}},
		{"the session's own env wins", domain.SessionSpec{Brokered: grant(githubHost), Env: map[string]string{"GH_TOKEN": "mine"}},
			map[string]string{"GITHUB_TOKEN": "ph-s1-github.com:443"}, fakeBrokers{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := brokering{brokers: tt.brokr}.tokenEnv(t.Context(), domain.Session{ID: "s1", Spec: tt.spec})
			if err != nil || !maps.Equal(got, tt.want) {
				t.Errorf("tokenEnv = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
