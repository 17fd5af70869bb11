package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// gitServer serves bare repositories over git's smart HTTP protocol (git
// http-backend as a CGI program) on 127.0.0.1, behind HTTP basic auth.
type gitServer struct {
	URL        string // base URL; a repository is URL + "/" + name + ".git"
	root       string
	user, pass string
	mu         sync.Mutex
	api        []string // the REST paths asked for, in order
}

// startGitServer serves repositories under a temp dir, requiring user:pass.
func startGitServer(t *testing.T, user, pass string) *gitServer {
	t.Helper()
	g, ln := serveGit(t, user, pass, nil)
	g.URL = "http://" + ln.Addr().String()
	return g
}

// startGitServerTLS is startGitServer over HTTPS with cert, its URL
// https://name:port (the name resolves nowhere: clients map it to
// 127.0.0.1 themselves); addr is where it listens.
func startGitServerTLS(t *testing.T, user, pass string, cert tls.Certificate, name string) (g *gitServer, addr string) {
	t.Helper()
	g, ln := serveGit(t, user, pass, &tls.Config{Certificates: []tls.Certificate{cert}})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	g.URL = "https://" + net.JoinHostPort(name, port)
	return g, ln.Addr().String()
}

// serveGit serves git http-backend on 127.0.0.1, over TLS when tc is set.
func serveGit(t *testing.T, user, pass string, tc *tls.Config) (*gitServer, net.Listener) {
	t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if out, err := exec.Command("git", "--exec-path").Output(); err == nil {
		backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	}
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git http-backend not found: %v", err)
	}
	g := &gitServer{root: t.TempDir(), user: user, pass: pass}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/api/v3/"); ok { // a gh-style API call: the password as a token
			g.mu.Lock()
			g.api = append(g.api, r.URL.Path)
			g.mu.Unlock()
			if r.Header.Get("Authorization") != "token "+g.pass && r.Header.Get("Authorization") != "Bearer "+g.pass {
				http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
				return
			}
			switch name, isRepo := strings.CutPrefix(rest, "repos/"); {
			case rest == "user":
				fmt.Fprintf(w, `{"login":%q}`, g.user)
			case isRepo && g.hasRepo(name):
				fmt.Fprintf(w, `{"full_name":%q}`, name)
			default:
				http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			}
			return
		}
		if u, p, ok := r.BasicAuth(); !ok || u != g.user || p != g.pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})}
	serve := func() error { return srv.Serve(ln) }
	if tc != nil {
		srv.TLSConfig = tc
		serve = func() error { return srv.ServeTLS(ln, "", "") }
	}
	go func() { _ = serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	return g, ln
}

// hasRepo reports whether name (OWNER/NAME) is a repository here.
func (g *gitServer) hasRepo(name string) bool {
	st, err := os.Stat(filepath.Join(g.root, filepath.FromSlash(name)+".git"))
	return err == nil && st.IsDir() && !strings.Contains(name, "..")
}

// apiCalls are the REST paths asked for so far.
func (g *gitServer) apiCalls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.api...)
}

// lastCommit is the subject of the newest commit on branch of repository
// name.
func (g *gitServer) lastCommit(t *testing.T, name, branch string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", filepath.Join(g.root, name+".git"), "log", "-1", "--format=%s", branch).CombinedOutput()
	if err != nil {
		t.Fatalf("git log of %s: %v\n%s", name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// show is a file's content at a branch.
func (g *gitServer) show(t *testing.T, name, branch, file string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", filepath.Join(g.root, name+".git"), "show", branch+":"+file).CombinedOutput()
	if err != nil {
		t.Fatalf("git show %s:%s of %s: %v\n%s", branch, file, name, err, out)
	}
	return string(out)
}

// repo creates a bare repository name.git (name may be OWNER/NAME)
// holding one commit of files and returns its URL.
func (g *gitServer) repo(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	gitRun := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.invalid",
			"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+work)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitRun(work, "init", "-q", "-b", "main")
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(work, "add", "-A")
	gitRun(work, "commit", "-q", "-m", "initial")
	bare := filepath.Join(g.root, name+".git")
	gitRun(g.root, "clone", "-q", "--bare", work, bare)
	gitRun(bare, "config", "http.receivepack", "true")
	return g.URL + "/" + name + ".git"
}
