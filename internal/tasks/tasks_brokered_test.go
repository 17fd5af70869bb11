package tasks

import (
	"context"
	"maps"
	"reflect"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
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

// TestGrantsPinEachRepositoryWithWhatItAllows: a grant names each
// repository on its host by path with its push and API flags (fetch only
// unless the profile says); github.com brings api.github.com only when a
// repository there grants API use.
func TestGrantsPinEachRepositoryWithWhatItAllows(t *testing.T) {
	t.Parallel()
	st := coordinatortest.NewStore(t)
	for _, s := range []domain.Secret{{ID: "sec-gh", Org: domain.FirstOrg, Kind: apiv1.SecretGitHTTPS, Name: "gh", Sealed: []byte("x")}, {ID: "sec-ghe", Org: domain.FirstOrg, Kind: apiv1.SecretGitHubApp, Name: "ghe", Sealed: []byte("x")}} {
		if err := st.PutSecret(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	repo := func(url, cred string, push, api bool) apiv1.ProfileRepo {
		return apiv1.ProfileRepo{URL: url, Credential: cred, Push: push, API: api}
	}
	for _, tt := range []struct {
		name  string
		repos []apiv1.ProfileRepo
		want  []domain.BrokeredGrant
	}{
		{"fetch only by default, no API host", []apiv1.ProfileRepo{repo("https://github.com/acme/app.git", "gh", false, false),
			repo("http://plain.test/a/b.git", "gh", true, true), repo("https://github.com/acme/public.git", "", true, true)},
			[]domain.BrokeredGrant{{Host: githubHost, SecretID: "sec-gh", Access: []domain.RepoAccess{{Path: "/acme/app"}}}}},
		{"push and API; the API host shares them", []apiv1.ProfileRepo{repo("https://github.com/acme/app.git", "gh", true, false),
			repo("https://github.com/acme/lib", "gh", false, true)},
			[]domain.BrokeredGrant{
				{Host: githubHost, SecretID: "sec-gh", Access: []domain.RepoAccess{{Path: "/acme/app", Push: true}, {Path: "/acme/lib", API: true}}},
				{Host: githubAPIHost, SecretID: "sec-gh", Access: []domain.RepoAccess{{Path: "/acme/app", Push: true}, {Path: "/acme/lib", API: true}}}}},
		{"one repository at two paths gets what either grants", []apiv1.ProfileRepo{repo("https://ghe.test:8443/acme/app.git", "ghe", true, false),
			{URL: "https://ghe.test:8443/acme/app", Path: "app2", Credential: "ghe", API: true}},
			[]domain.BrokeredGrant{{Host: "ghe.test:8443", SecretID: "sec-ghe", Access: []domain.RepoAccess{{Path: "/acme/app", Push: true, API: true}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := brokering{st: st, brokers: fakeBrokers{}}.grants(t.Context(), domain.FirstOrg, apiv1.ProfileSpec{Repos: tt.repos})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("grants = %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}
