package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// judgeCase is a request to host and what judge makes of it under
// judgeGrant: what it does, or "" for refused.
type judgeCase struct {
	host, method, target string
	want                 string
}

func judgeGrant() []domain.RepoAccess {
	return []domain.RepoAccess{{Path: "/acme/app", Push: true, API: true}, {Path: "/acme/ro"}, {Path: "/acme/readapi", API: true},
		{Path: "/group/sub/proj", Push: true}}
}

// gitCases are judgeCases of git's smart HTTP, of what is ambiguous and
// of methods.
func gitCases() []judgeCase {
	return []judgeCase{
		// git smart HTTP
		{"git.test", "GET", "/acme/app.git/info/refs?service=git-upload-pack", "git fetch"},
		{"git.test", "GET", "/acme/app/info/refs?service=git-upload-pack", "git fetch"},
		{"git.test", "POST", "/acme/app.git/git-upload-pack", "git fetch"},
		{"git.test", "GET", "/acme/app.git/info/refs?service=git-receive-pack", "git push"},
		{"git.test", "POST", "/acme/app/git-receive-pack", "git push"},
		{"git.test", "POST", "/group/sub/proj.git/git-receive-pack", "git push"},
		{"git.test", "GET", "/acme/ro.git/info/refs?service=git-upload-pack", "git fetch"},
		{"git.test", "GET", "/acme/ro.git/info/refs?service=git-receive-pack", ""},
		{"git.test", "POST", "/acme/ro.git/git-receive-pack", ""},
		{"git.test", "GET", "/acme/app.git/info/refs", ""},
		{"git.test", "GET", "/acme/app.git/info/refs?service=git-upload-pack&x=1", ""},
		{"git.test", "POST", "/acme/app.git/git-upload-pack?x", ""},
		{"git.test", "GET", "/acme/app.git/git-upload-pack", ""},
		{"git.test", "GET", "/acme/app.git/objects/info/packs", ""},
		{"git.test", "GET", "/acme/other.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app.gitx/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/appx/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/info/refs?service=git-upload-pack", ""},
		// case: folded on GitHub only
		{"github.com", "GET", "/ACME/App.git/info/refs?service=git-upload-pack", "git fetch"},
		{"git.test", "GET", "/ACME/App.git/info/refs?service=git-upload-pack", ""},
		{"github.com", "GET", "/acme/app.GIT/info/refs?service=git-upload-pack", ""},
		// ambiguity is refused, never normalised
		{"git.test", "GET", "/acme/app/../other.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/other/../app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/./app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "//acme/app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme//app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme%2Fapp.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app%2egit/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app.git/info%2frefs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app.git/info/refs%3Fservice=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app%5c.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme\\app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "/acme/app.git/info/refs%", ""},
		{"git.test", "GET", "/acme/app%00.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "https://git.test/acme/app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "GET", "*", ""},
		// methods
		{"git.test", "TRACE", "/acme/app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "TRACK", "/acme/app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "OPTIONS", "/acme/app.git/info/refs?service=git-upload-pack", ""},
		{"git.test", "CONNECT", "git.test:443", ""},
		{"git.test", "get", "/acme/app.git/info/refs?service=git-upload-pack", ""},
	}
}

// restCases are judgeCases of the REST API.
func restCases() []judgeCase {
	return []judgeCase{
		// REST on another host: /api/v3/repos/…
		{"git.test", "GET", "/api/v3/repos/acme/app", "API read"},
		{"git.test", "HEAD", "/api/v3/repos/acme/app/pulls?state=open&per_page=100", "API read"},
		{"git.test", "POST", "/api/v3/repos/acme/app/pulls", "API write"},
		{"git.test", "PATCH", "/api/v3/repos/acme/app/pulls/12", "API write"},
		{"git.test", "POST", "/api/v3/repos/acme/app/issues/3/comments", "API write"},
		{"git.test", "POST", "/api/v3/repos/acme/app/statuses/0123abc", "API write"},
		{"git.test", "PATCH", "/api/v3/repos/acme/app/git/refs/heads/feature/x", "API write"},
		{"git.test", "PUT", "/api/v3/repos/acme/app/contents/docs/a%20b.md", "API write"},
		{"git.test", "PATCH", "/api/v3/repos/acme/app/pulls/comments", ""},
		{"git.test", "PUT", "/api/v3/repos/acme/app/pulls/12/merge", ""},
		{"git.test", "DELETE", "/api/v3/repos/acme/app", ""},
		{"git.test", "PATCH", "/api/v3/repos/acme/app", ""},
		{"git.test", "POST", "/api/v3/repos/acme/app/hooks", ""},
		{"git.test", "GET", "/api/v3/repos/acme/app/hooks", ""},
		{"git.test", "PUT", "/api/v3/repos/acme/app/collaborators/mallory", ""},
		{"git.test", "POST", "/api/v3/repos/acme/app/keys", ""},
		{"git.test", "GET", "/api/v3/repos/acme/app/actions/secrets", ""},
		{"git.test", "PUT", "/api/v3/repos/acme/app/actions/secrets/X", ""},
		{"git.test", "POST", "/api/v3/repos/acme/app/transfer", ""},
		{"git.test", "GET", "/api/v3/repos/acme/readapi/pulls", "API read"},
		{"git.test", "POST", "/api/v3/repos/acme/readapi/pulls", ""},
		{"git.test", "GET", "/api/v3/repos/acme/ro", ""},
		{"git.test", "GET", "/api/v3/repos/acme/other", ""},
		{"git.test", "GET", "/api/v3/repos/acme/app.git", ""},
		{"git.test", "GET", "/api/v3/user", ""},
		{"git.test", "POST", "/api/v3/user/keys", ""},
		{"git.test", "POST", "/api/graphql", ""},
		// github.com serves git only; api.github.com the API only
		{"github.com", "GET", "/api/v3/repos/acme/app", ""},
		{"api.github.com", "GET", "/repos/ACME/app/pulls", "API read"},
		{"api.github.com", "POST", "/repos/acme/app/issues", "API write"},
		{"api.github.com", "GET", "/acme/app.git/info/refs?service=git-upload-pack", ""},
		{"api.github.com", "POST", "/user/keys", ""},
		{"api.github.com", "GET", "/user", ""},
		{"api.github.com", "POST", "/graphql", ""},
		{"api.github.com", "DELETE", "/repos/acme/app", ""},
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	for _, tt := range append(gitCases(), restCases()...) {
		got, err := judge(judgeGrant(), roleOf(tt.host), tt.method, tt.target)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("%s %s %s: allowed as %q, want refused", tt.host, tt.method, tt.target, got.what)
		case tt.want != "" && err != nil:
			t.Errorf("%s %s %s: %v, want %s", tt.host, tt.method, tt.target, err, tt.want)
		case err != nil && !errors.Is(err, errNotGranted):
			t.Errorf("%s %s %s: %v does not wrap errNotGranted", tt.host, tt.method, tt.target, err)
		case tt.want != "" && got.what != tt.want:
			t.Errorf("%s %s %s: %s, want %s", tt.host, tt.method, tt.target, got.what, tt.want)
		}
	}
}

// TestJudgeWithoutAccessRefusesAll: a grant with no repositories (a
// session recorded before grants named them) allows nothing.
func TestJudgeWithoutAccessRefusesAll(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"/acme/app.git/info/refs?service=git-upload-pack", "/api/v3/repos/acme/app", "/"} {
		if _, err := judge(nil, roleOf("git.test"), "GET", target); err == nil {
			t.Errorf("%s allowed by an empty grant", target)
		}
	}
}

// FuzzJudge: whatever the target, an allowed one is a plain path of a
// granted repository: no dot element, no escaped separator.
func FuzzJudge(f *testing.F) {
	for _, s := range []string{"/acme/app.git/info/refs?service=git-upload-pack", "/api/v3/repos/acme/app/pulls", "/acme/app/../x", "/acme%2Fapp"} {
		f.Add("GET", s)
	}
	grant := []domain.RepoAccess{{Path: "/acme/app", Push: true, API: true}}
	f.Fuzz(func(t *testing.T, method, target string) {
		got, err := judge(grant, roleOf("git.test"), method, target)
		if err != nil {
			return
		}
		path, _, _ := strings.Cut(target, "?")
		low := strings.ToLower(path)
		if got.repo.Path != "/acme/app" || strings.Contains(path, "/.") || strings.Contains(path, "//") || strings.Contains(low, "%2f") ||
			strings.Contains(low, "%2e") || strings.ContainsAny(target, "\\\x00\r\n ") ||
			!(strings.HasPrefix(path, "/acme/app") || strings.HasPrefix(path, "/api/v3/repos/acme/app")) {
			t.Fatalf("%s %q allowed as %+v", method, target, got)
		}
	})
}
