package tasks

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/secrets"
)

// fakeAppTokens stands for the GitHub App minter: it records what it was
// asked for and answers with its token or error.
type fakeAppTokens struct {
	mu    sync.Mutex
	calls []appCall
	token string
	err   error
}

type appCall struct {
	app   ghapp.App
	repos []string
	perms map[string]string
}

func (f *fakeAppTokens) Token(_ context.Context, app ghapp.App, repos []string, perms map[string]string) (ghapp.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, appCall{app, slices.Clone(repos), perms})
	if f.err != nil {
		return ghapp.Token{}, f.err
	}
	return ghapp.Token{Token: f.token, ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// gitHost serves bare repositories under root over smart HTTP (git
// http-backend) to requests whose basic login is one of logins.
type gitHost struct {
	root   string
	logins []string
	mu     sync.Mutex
	seen   []string // the logins presented, decoded
}

func (g *gitHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	g.mu.Lock()
	if ok {
		g.seen = append(g.seen, user+":"+pass)
	}
	g.mu.Unlock()
	if !ok || !slices.Contains(g.logins, user+":"+pass) {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	backend := filepath.Join(gitExecPath(), "git-http-backend")
	(&cgi.Handler{Path: backend, Root: "/", Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}).ServeHTTP(w, r)
}

func gitExecPath() string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// bareRepo makes root/owner/name.git holding one commit of README.
func bareRepo(t *testing.T, root, owner, name, readme string) {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x"}
	work := t.TempDir()
	bare := filepath.Join(root, owner, name+".git")
	for _, args := range [][]string{{"init", "-q", "-b", "main", work}, {"-C", work, "add", "README"}, {"-C", work, "commit", "-qm", "first"},
		{"clone", "-q", "--bare", work, bare}} {
		if args[0] == "-C" && args[2] == "add" {
			if err := os.WriteFile(filepath.Join(work, "README"), []byte(readme), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := git(t.Context(), root, env, args...); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

var appKeyPEM = sync.OnceValue(func() []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
})

// TestCloneWithGitHubApp: a repo whose credential is a GitHub App is
// cloned with a token minted for the repos sharing that credential; a
// git_https login still clones as before; a refused mint fails the clone
// with its category.
func TestCloneWithGitHubApp(t *testing.T) {
	t.Parallel()
	if gitExecPath() == "" {
		t.Skip("no git")
	}
	root := t.TempDir()
	bareRepo(t, root, "acme", "app", "hello from app\n")
	gh := &gitHost{root: root, logins: []string{"x-access-token:ghs_minted", "bot:ghp_static"}}
	srv := httptest.NewServer(gh)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	st := coordinatortest.NewStore(t)
	vault, err := secrets.New(secrets.Deps{Store: st, Sealer: coordinatortest.Sealer{}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(name, kind string, meta map[string]any, value []byte) {
		raw, _ := json.Marshal(meta)
		s := domain.Secret{ID: domain.SecretID("sec-" + name), Org: domain.FirstOrg, Kind: kind, Name: name, Meta: raw}
		s.Sealed, _ = coordinatortest.Sealer{}.Seal(value, secrets.AssociatedData(s.ID))
		if err := st.PutSecret(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	put("bot", apiv1.SecretGitHubApp, map[string]any{"host": host, "app_id": "Iv23bot", "installation_id": 4242, "base_url": "https://ghe.example.com/api/v3"}, appKeyPEM())
	put("login", apiv1.SecretGitHTTPS, map[string]any{"host": host, "username": "bot"}, []byte("ghp_static"))

	repo := func(name, cred string) apiv1.ProfileRepo {
		return apiv1.ProfileRepo{URL: srv.URL + "/acme/" + name + ".git", Path: name, Credential: cred}
	}
	all := []apiv1.ProfileRepo{repo("app", "bot"), repo("lib", "bot"), repo("docs", "login"), repo("app", "login")}
	cases := []struct {
		name      string
		r         apiv1.ProfileRepo
		tokens    *fakeAppTokens
		wantRepos []string // what the token was scoped to; nil: no mint
		wantErr   error
	}{
		{"github app", all[0], &fakeAppTokens{token: "ghs_minted"}, []string{"app", "lib"}, nil},
		{"git login", all[3], &fakeAppTokens{token: "unused"}, nil, nil},
		{"installation refuses", all[0], &fakeAppTokens{err: fmt.Errorf("mint: %w", ghapp.ErrScope)}, []string{"app", "lib"}, ghapp.ErrScope},
		{"stale token", all[0], &fakeAppTokens{token: "ghs_revoked"}, []string{"app", "lib"}, errCloneFailed},
		{"no minter", all[0], nil, nil, domain.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := &Tasks{st: st, secrets: vault}
			if c.tokens != nil {
				tc.appTokens = c.tokens
			}
			err := cloneHere(t, tc, c.r, all)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatal(err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("clone: %v, want %v", err, c.wantErr)
			}
			if c.wantRepos == nil {
				if c.tokens != nil && len(c.tokens.calls) != 0 {
					t.Fatalf("minted %+v for a git_https login", c.tokens.calls)
				}
				return
			}
			if len(c.tokens.calls) != 1 {
				t.Fatalf("%d mints, want 1", len(c.tokens.calls))
			}
			call := c.tokens.calls[0]
			if !slices.Equal(call.repos, c.wantRepos) || call.app.ID != "Iv23bot" || call.app.InstallationID != 4242 ||
				call.app.BaseURL != "https://ghe.example.com/api/v3" || call.app.Key == nil || !maps.Equal(call.perms, map[string]string{"contents": "read", "metadata": "read"}) {
				t.Fatalf("minted for app %+v repos %v perms %v, want Iv23bot/4242 at the Enterprise API, repos %v, contents and metadata to read", call.app, call.repos, call.perms, c.wantRepos)
			}
		})
	}
	gh.mu.Lock()
	defer gh.mu.Unlock()
	if !slices.Contains(gh.seen, "x-access-token:ghs_minted") || !slices.Contains(gh.seen, "bot:ghp_static") {
		t.Fatalf("the git host saw logins %q", gh.seen)
	}
}

// errCloneFailed marks a clone git itself refused.
var errCloneFailed = errors.New("git clone failed")

// cloneHere clones r the way setup does (gitEnv, then git clone) into a
// temp dir and checks the clone's README.
func cloneHere(t *testing.T, c *Tasks, r apiv1.ProfileRepo, all []apiv1.ProfileRepo) error {
	t.Helper()
	tmp := t.TempDir()
	env, err := c.gitEnv(t.Context(), domain.FirstOrg, r, all, tmp)
	if err != nil {
		return err
	}
	for _, kv := range env {
		if strings.Contains(kv, "Authorization: Basic ") {
			auth, _ := base64.StdEncoding.DecodeString(kv[strings.LastIndex(kv, " ")+1:])
			if strings.Contains(string(auth), "PRIVATE KEY") {
				t.Fatal("the app's private key went to git")
			}
		}
	}
	work := filepath.Join(tmp, "repo")
	if out, err := git(t.Context(), tmp, env, "clone", "--quiet", "--", r.URL, work); err != nil {
		return fmt.Errorf("%w: %v: %s", errCloneFailed, err, out)
	}
	b, err := os.ReadFile(filepath.Join(work, "README"))
	if err != nil || string(b) != "hello from app\n" {
		t.Fatalf("README of the clone: %q, %v", b, err)
	}
	return nil
}
