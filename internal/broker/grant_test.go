package broker_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/secrets"
)

// echoAnswer is an upstream that hands back everything it was sent: each
// request header as an Echo- header, the login (decoded from Basic) as
// cookies, a header named after a Bearer token, an early hint and a
// trailer, and in the body the raw request, then the login in base64 (both
// alphabets, three alignments) and URL-escaped; gzip-, deflate- or
// br-encoded when X-Echo-Encoding asks.
func echoAnswer(w http.ResponseWriter, r *http.Request) {
	dump, _ := httputil.DumpRequest(r, true)
	auth := r.Header.Get("Authorization")
	login := auth[strings.IndexByte(auth, ' ')+1:]
	if user, pass, ok := r.BasicAuth(); ok {
		login = user + ":" + pass
	}
	h := w.Header()
	h.Set("X-Hint", login)
	w.WriteHeader(http.StatusEarlyHints)
	h.Del("X-Hint")
	for k, vv := range r.Header {
		for _, v := range vv {
			h.Add("Echo-"+k, v)
		}
	}
	h.Add("Set-Cookie", "session="+url.QueryEscape(login))
	h.Add("Set-Cookie2", "s="+url.QueryEscape(login))
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
		h.Set("X-Key-"+tok, "1")
	}
	h.Set("Trailer", "X-Trail")
	var body bytes.Buffer
	body.Write(dump)
	for _, pre := range []string{"", "x", "xy"} {
		fmt.Fprintf(&body, "\nstd %q=%s\nurl %q=%s", pre, base64.StdEncoding.EncodeToString([]byte(pre+login)),
			pre, base64.URLEncoding.EncodeToString([]byte(pre+login)))
	}
	fmt.Fprintf(&body, "\nquery=%s\npath=%s\n", url.QueryEscape(login), url.PathEscape(login))
	out := body.Bytes()
	switch enc := r.Header.Get("X-Echo-Encoding"); enc {
	case "gzip", "deflate":
		var z bytes.Buffer
		var zw io.WriteCloser = gzip.NewWriter(&z)
		if enc == "deflate" {
			zw = zlib.NewWriter(&z)
		}
		zw.Write(out)
		zw.Close()
		out = z.Bytes()
		h.Set("Content-Encoding", enc)
	case "br":
		h.Set("Content-Encoding", "br")
	}
	w.Write(out)
	h.Set("X-Trail", login)
}

// tapped keeps every byte the guest reads.
type tapped struct {
	net.Conn
	mu  *sync.Mutex
	got *bytes.Buffer
}

func (c tapped) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// TestBrokerNeverShowsTheCredentialToTheGuest (issue 25): an upstream that
// echoes every request back, asked with TRACE, TRACK and ordinary GETs
// (plain, gzip- and deflate-encoded, git and API paths), never shows the
// guest the real credential: not in any byte it receives (status lines,
// headers, bodies), raw, in base64 (both alphabets, every alignment, of
// the token and of user:token) or URL-escaped. Set-Cookie never arrives;
// TRACE and TRACK never reach the upstream; an encoding the broker cannot
// check is refused.
func TestBrokerNeverShowsTheCredentialToTheGuest(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, envConfig{trusted: true, names: []string{"git.test"}, answer: http.HandlerFunc(echoAnswer)})
	s := e.session(t)
	ph := e.placeholder(t, s)
	const git = "/repo.git/info/refs?service=git-upload-pack"
	req := func(method, target, auth string, extra ...string) string {
		return method + " " + target + " HTTP/1.1\r\nHost: git.test\r\nAuthorization: " + auth + "\r\n" + strings.Join(extra, "") + "\r\n"
	}
	var mu sync.Mutex
	var all bytes.Buffer
	for _, tt := range []struct {
		name, raw string
		status    int
		upstream  int
		body      string // in the answer
	}{
		{"TRACE", req("TRACE", git, basic("x-access-token", ph)), 403, 0, `refused TRACE "` + git + `"`},
		{"TRACK", req("TRACK", git, basic("x-access-token", ph)), 403, 0, `refused TRACK`},
		{"a git GET with Basic", req("GET", git, basic("x-access-token", ph)), 200, 1, "Authorization: Basic "},
		{"a git GET with Bearer", req("GET", git, "Bearer "+ph), 200, 1, "Authorization: Bearer " + ph},
		{"an API GET with token", req("GET", "/api/v3/repos/repo/pulls", "token "+ph), 200, 1, "Authorization: token " + ph},
		{"a gzip-encoded echo", req("GET", git, basic("x-access-token", ph), "X-Echo-Encoding: gzip\r\n"), 200, 1, "query="},
		{"a deflate-encoded echo", req("GET", git, "Bearer "+ph, "X-Echo-Encoding: deflate\r\n"), 200, 1, "Authorization: Bearer " + ph},
		{"an encoding the broker cannot check", req("GET", git, "Bearer "+ph, "X-Echo-Encoding: br\r\n"), 502, 1, "content encoding"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := e.up.got()
			tc, err := e.guest(t, s, "git.test")
			if err != nil {
				t.Fatal(err)
			}
			guest := tapped{Conn: tc, mu: &mu, got: &all}
			resp, body := roundTrip(t, guest, bufio.NewReader(guest), tt.raw)
			if resp == nil || resp.StatusCode != tt.status || !strings.Contains(body, tt.body) {
				t.Fatalf("%v %q, want %d holding %q (events %s)", resp, body, tt.status, tt.body, e.events.reasons())
			}
			if n, _ := e.up.got(); n-before != tt.upstream {
				t.Errorf("the upstream got %d requests, want %d", n-before, tt.upstream)
			}
			if tt.upstream > 0 && !strings.Contains(e.up.lastAuth(), realToken) && !strings.Contains(e.up.lastAuth(), base64.StdEncoding.EncodeToString([]byte("bot:"+realToken))) {
				t.Errorf("the upstream got Authorization %q: the echo had no credential to leak", e.up.lastAuth())
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	got := all.Bytes()
	if l := leaks(got, realToken, "bot:"+realToken); len(l) > 0 {
		t.Errorf("the guest received the credential: %v", l)
	}
	if bytes.Contains(bytes.ToLower(got), []byte("set-cookie")) || bytes.Contains(got, []byte("X-Trail")) || bytes.Contains(got, []byte("X-Hint")) {
		t.Errorf("a cookie, trailer or early hint reached the guest:\n%s", got)
	}
	if !bytes.Contains(got, []byte(ph)) || !bytes.Contains(got, []byte("Echo-Authorization")) {
		t.Errorf("the echoes did not arrive with the placeholder in the credential's place:\n%s", got)
	}
}

// TestBrokerRefusesWhatTheGrantDoesNot (issue 25): with the credential or
// without, a request outside the session's grant is refused (403) before
// anything reaches the upstream, and recorded naming its method and path.
func TestBrokerRefusesWhatTheGrantDoesNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "git.test")
	s := e.session(t, domain.RepoAccess{Path: "/acme/app", API: true}, domain.RepoAccess{Path: "/acme/ro"})
	ph := e.placeholder(t, s)
	for _, tt := range []struct {
		name, method, target string
	}{
		{"add an SSH key to the token's user", "POST", "/user/keys"},
		{"add an SSH key through the API prefix", "POST", "/api/v3/user/keys"},
		{"the token's user", "GET", "/api/v3/user"},
		{"delete the granted repository", "DELETE", "/api/v3/repos/acme/app"},
		{"change the granted repository", "PATCH", "/api/v3/repos/acme/app"},
		{"an ungranted repository's git path", "GET", "/acme/other.git/info/refs?service=git-upload-pack"},
		{"an ungranted repository's REST path", "GET", "/api/v3/repos/acme/other"},
		{"advertise receive-pack without push", "GET", "/acme/app.git/info/refs?service=git-receive-pack"},
		{"receive-pack without push", "POST", "/acme/app.git/git-receive-pack"},
		{"an API write without push", "POST", "/api/v3/repos/acme/app/pulls"},
		{"REST without API use", "GET", "/api/v3/repos/acme/ro"},
		{"a .. out of the granted repository", "GET", "/acme/app/../other.git/info/refs?service=git-upload-pack"},
		{"an escaped /", "GET", "/acme%2Fother.git/info/refs?service=git-upload-pack"},
		{"an escaped .", "GET", "/acme/app/%2e%2e/other.git/info/refs?service=git-upload-pack"},
		{"another query on a git path", "GET", "/acme/app.git/info/refs?service=git-upload-pack&x=1"},
		{"GraphQL", "POST", "/api/graphql"},
		{"TRACE", "TRACE", "/acme/app.git/info/refs?service=git-upload-pack"},
		{"TRACK", "TRACK", "/acme/app.git/info/refs?service=git-upload-pack"},
		{"OPTIONS", "OPTIONS", "/acme/app.git/info/refs?service=git-upload-pack"},
		{"CONNECT", "CONNECT", "git.test:443"},
		{"OPTIONS *", "OPTIONS", "*"},
	} {
		for _, auth := range []string{"Authorization: token " + ph + "\r\n", ""} {
			tc, err := e.guest(t, s, "git.test")
			if err != nil {
				t.Fatal(err)
			}
			resp, body := roundTrip(t, tc, bufio.NewReader(tc), tt.method+" "+tt.target+" HTTP/1.1\r\nHost: git.test\r\n"+auth+"Content-Length: 0\r\n\r\n")
			if resp == nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not in the session's grant") {
				t.Errorf("%s (%q): %v %q, want 403", tt.name, auth, resp, body)
			}
		}
		if want := fmt.Sprintf("deny git.test:443 refused %s %q", tt.method, tt.target); !strings.Contains(e.events.reasons(), want) {
			t.Errorf("%s: no event %q in\n%s", tt.name, want, e.events.reasons())
		}
	}
	if n, raw := e.up.got(); n != 0 {
		t.Fatalf("the upstream got %d requests:\n%s", n, raw)
	}
	// What the grant allows still goes through, on the same session.
	tc, err := e.guest(t, s, "git.test")
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := roundTrip(t, tc, bufio.NewReader(tc), "GET /acme/app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: git.test\r\n\r\n"); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("a granted fetch: %v %q", resp, body)
	}
}

// fakeTokens is GitHub's token endpoint: it records what each token was
// asked for and mints ghs_N.
type fakeTokens struct {
	mu    sync.Mutex
	asked []tokenAsk
}

type tokenAsk struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

func (f *fakeTokens) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var a tokenAsk
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.asked = append(f.asked, a)
	n := len(f.asked)
	f.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"token":"ghs_minted%d","expires_at":"2099-01-01T00:00:00Z"}`, n)
}

// TestBrokerMintsAppTokensWithTheGrantsPermissions (issue 25): a GitHub
// App token is minted for the grant's repositories of the request's kind
// only, with contents: read unless the repository grants push (then
// write), and pull_requests and issues with API use.
func TestBrokerMintsAppTokensWithTheGrantsPermissions(t *testing.T) {
	t.Parallel()
	gh := &fakeTokens{}
	ghs := httptest.NewServer(gh)
	t.Cleanup(ghs.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	e := newEnvWith(t, envConfig{trusted: true, names: []string{"git.test"},
		secret: secrets.SecretRequest{Org: domain.FirstOrg, Name: "app", Kind: apiv1.SecretGitHubApp, Value: keyPEM,
			Meta: apiv1.SecretMeta{AppID: "12345", InstallationID: 7, BaseURL: ghs.URL, Host: "git.test"}},
		apps: ghapp.New(ghapp.Config{}, ghapp.Deps{HTTP: ghs.Client()})})
	s := e.session(t, domain.RepoAccess{Path: "/acme/app"}, domain.RepoAccess{Path: "/acme/lib", Push: true},
		domain.RepoAccess{Path: "/acme/docs", Push: true, API: true}, domain.RepoAccess{Path: "/acme/wiki"})
	ph := e.placeholder(t, s)
	for _, tt := range []struct {
		name, method, target string
		want                 tokenAsk
	}{
		{"a fetch without push", "GET", "/acme/app.git/info/refs?service=git-upload-pack",
			tokenAsk{[]string{"app", "wiki"}, map[string]string{"contents": "read", "metadata": "read"}}},
		{"a push", "POST", "/acme/lib.git/git-receive-pack",
			tokenAsk{[]string{"lib"}, map[string]string{"contents": "write", "metadata": "read"}}},
		{"an API call with push", "GET", "/api/v3/repos/acme/docs/pulls",
			tokenAsk{[]string{"docs"}, map[string]string{"contents": "write", "metadata": "read", "pull_requests": "write", "issues": "write"}}},
	} {
		tc, err := e.guest(t, s, "git.test")
		if err != nil {
			t.Fatal(err)
		}
		gh.mu.Lock()
		before := len(gh.asked)
		gh.mu.Unlock()
		resp, body := roundTrip(t, tc, bufio.NewReader(tc), tt.method+" "+tt.target+" HTTP/1.1\r\nHost: git.test\r\nAuthorization: "+basic("x", ph)+"\r\nContent-Length: 0\r\n\r\n")
		if resp == nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %q (events %s)", tt.name, resp, body, e.events.reasons())
		}
		gh.mu.Lock()
		asked := gh.asked[before:]
		gh.mu.Unlock()
		if len(asked) != 1 || !reflect.DeepEqual(asked[0], tt.want) {
			t.Errorf("%s: asked %+v, want %+v", tt.name, asked, tt.want)
		}
		if got, want := e.up.lastAuth(), basic("x-access-token", fmt.Sprintf("ghs_minted%d", before+1)); got != want {
			t.Errorf("%s: the upstream got %q, want %q", tt.name, got, want)
		}
	}
}
