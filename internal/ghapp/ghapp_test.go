package ghapp

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testKey is one RSA key for the whole package: making one is slow.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func pemPKCS1(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

// clock is a settable time for the minter and the fake GitHub.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeGitHub serves POST /app/installations/{id}/access_tokens as GitHub
// documents it: an RS256 app JWT checked against the app's public key, a
// body scoping repositories and permissions, 201 with the token.
type fakeGitHub struct {
	t             *testing.T
	appID         string
	public        *rsa.PublicKey
	installations map[int64][]string // installation → the repositories it was given
	now           func() time.Time
	lifetime      time.Duration

	mu       sync.Mutex
	requests int
	bodies   []tokenRequest
}

type tokenRequest struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	n := f.requests
	f.mu.Unlock()
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"message":%q,"documentation_url":"https://docs.github.com/rest"}`, msg)
	}
	var id int64
	if _, err := fmt.Sscanf(r.URL.Path, "/app/installations/%d/access_tokens", &id); err != nil || r.Method != http.MethodPost {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" {
		f.t.Errorf("headers: %v", r.Header)
	}
	if err := f.checkJWT(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); err != nil {
		fail(http.StatusUnauthorized, "A JSON web token could not be decoded: "+err.Error())
		return
	}
	granted, ok := f.installations[id]
	if !ok {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	var body tokenRequest
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fail(http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	for _, repo := range body.Repositories {
		if !slices.Contains(granted, repo) {
			fail(http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	type repo struct {
		Name     string `json:"name"`
		FullName string `json:"full_name"`
	}
	resp := struct {
		Token               string            `json:"token"`
		ExpiresAt           string            `json:"expires_at"`
		Permissions         map[string]string `json:"permissions"`
		RepositorySelection string            `json:"repository_selection"`
		Repositories        []repo            `json:"repositories"`
	}{Token: fmt.Sprintf("ghs_token%d", n), ExpiresAt: f.now().Add(f.lifetime).UTC().Format(time.RFC3339),
		Permissions: body.Permissions, RepositorySelection: "selected"}
	for _, name := range body.Repositories {
		resp.Repositories = append(resp.Repositories, repo{Name: name, FullName: "acme/" + name})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(resp)
}

// checkJWT verifies the app JWT as GitHub does: RS256 over header.claims
// with the app's public key, issued by the app, in date.
func (f *fakeGitHub) checkJWT(jwt string) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return errors.New("not three parts")
	}
	dec := base64.RawURLEncoding
	sig, err := dec.DecodeString(parts[2])
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(f.public, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	var header struct{ Alg, Typ string }
	var claims struct {
		Iat, Exp int64
		Iss      json.Number
	}
	h, _ := dec.DecodeString(parts[0])
	c, _ := dec.DecodeString(parts[1])
	if json.Unmarshal(h, &header) != nil || json.Unmarshal(c, &claims) != nil || header.Alg != "RS256" {
		return fmt.Errorf("header %s claims %s", h, c)
	}
	now := f.now().Unix()
	switch {
	case claims.Iss.String() != f.appID:
		return fmt.Errorf("iss %s, want %s", claims.Iss, f.appID)
	case claims.Iat > now-60 || claims.Iat < now-120:
		return fmt.Errorf("iat %d is not a minute before now %d", claims.Iat, now)
	case claims.Exp > now+600 || claims.Exp <= now:
		return fmt.Errorf("exp %d is not within 10 minutes of now %d", claims.Exp, now)
	}
	return nil
}

type rig struct {
	gh  *fakeGitHub
	srv *httptest.Server
	clk *clock
	m   *Minter
	app App
}

func newRig(t *testing.T) *rig {
	t.Helper()
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	gh := &fakeGitHub{t: t, appID: "12345", public: &testKey().PublicKey, now: clk.now, lifetime: time.Hour,
		installations: map[int64][]string{77: {"app", "lib", "docs"}}}
	srv := httptest.NewServer(gh)
	t.Cleanup(srv.Close)
	app, err := NewApp("12345", 77, srv.URL, pemPKCS1(testKey()))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{gh: gh, srv: srv, clk: clk, m: New(Config{}, Deps{HTTP: srv.Client(), Now: clk.now}), app: app}
}

func TestTokenMints(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	tok, err := r.m.Token(t.Context(), r.app, []string{"lib", "app", "lib"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Token != "ghs_token1" || !tok.ExpiresAt.Equal(r.clk.now().Add(time.Hour)) || !reflect.DeepEqual(tok.Repositories, []string{"app", "lib"}) ||
		!reflect.DeepEqual(tok.Permissions, DefaultPermissions()) {
		t.Fatalf("token = %+v", tok)
	}
	want := tokenRequest{Repositories: []string{"app", "lib"}, Permissions: map[string]string{"contents": "read", "metadata": "read"}}
	if len(r.gh.bodies) != 1 || !reflect.DeepEqual(r.gh.bodies[0], want) {
		t.Fatalf("request bodies = %+v, want [%+v]", r.gh.bodies, want)
	}
}

// TestTokenPermissions: a token asks for the permissions its caller
// names, and the cache keys on them: the same repositories with other
// permissions are another token.
func TestTokenPermissions(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	write := map[string]string{"contents": "write", "metadata": "read"}
	read := map[string]string{"contents": "read", "metadata": "read"}
	w1, err := r.m.Token(ctx, r.app, []string{"app"}, write)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := r.m.Token(ctx, r.app, []string{"app"}, read)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := r.m.Token(ctx, r.app, []string{"app"}, map[string]string{"metadata": "read", "contents": "write"})
	if err != nil {
		t.Fatal(err)
	}
	if w1.Token == r1.Token || w2.Token != w1.Token || r.gh.requests != 2 {
		t.Fatalf("tokens %s %s %s after %d requests: want one per permission set", w1.Token, r1.Token, w2.Token, r.gh.requests)
	}
	if !reflect.DeepEqual(r.gh.bodies[0].Permissions, write) || !reflect.DeepEqual(r.gh.bodies[1].Permissions, read) {
		t.Fatalf("asked %+v", r.gh.bodies)
	}
	for _, bad := range []map[string]string{{"contents": "admin"}, {"Contents": "read"}, {"": "read"}, {"contents": ""}} {
		if _, err := r.m.Token(ctx, r.app, []string{"app"}, bad); err == nil {
			t.Errorf("permissions %v accepted", bad)
		}
	}
	if r.gh.requests != 2 {
		t.Fatalf("%d requests for refused permissions", r.gh.requests)
	}
}

// TestTokenRefresh: a token is reused while it has more than RefreshBefore
// left, and minted anew after; another scope is another token.
func TestTokenRefresh(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	first, err := r.m.Token(ctx, r.app, []string{"app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.clk.add(49 * time.Minute) // 11 minutes left
	again, err := r.m.Token(ctx, r.app, []string{"app"}, nil)
	if err != nil || again.Token != first.Token || r.gh.requests != 1 {
		t.Fatalf("within its life: %+v, %v after %d requests; want the cached %s", again, err, r.gh.requests, first.Token)
	}
	other, err := r.m.Token(ctx, r.app, []string{"app", "lib"}, nil)
	if err != nil || other.Token == first.Token || r.gh.requests != 2 {
		t.Fatalf("another scope: %+v, %v after %d requests", other, err, r.gh.requests)
	}
	r.clk.add(2 * time.Minute) // 9 minutes left: under RefreshBefore
	fresh, err := r.m.Token(ctx, r.app, []string{"app"}, nil)
	if err != nil || fresh.Token == first.Token || r.gh.requests != 3 || !fresh.ExpiresAt.Equal(r.clk.now().Add(time.Hour)) {
		t.Fatalf("near expiry: %+v, %v after %d requests; want a new token", fresh, err, r.gh.requests)
	}
}

func TestTokenErrors(t *testing.T) {
	t.Parallel()
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		app   func(r *rig) App
		repos []string
		serve http.HandlerFunc // nil: the fake GitHub
		want  error
		msg   string
	}{
		{"wrong key", func(r *rig) App { a := r.app; a.Key = other; return a }, []string{"app"}, nil, ErrAppAuth, "check the app id and private key"},
		{"wrong app id", func(r *rig) App { a := r.app; a.ID = "999"; return a }, []string{"app"}, nil, ErrAppAuth, "iss 999"},
		{"unknown installation", func(r *rig) App { a := r.app; a.InstallationID = 78; return a }, []string{"app"}, nil, ErrInstallation, "check the installation id"},
		{"repo not in installation", func(r *rig) App { return r.app }, []string{"app", "secret-repo"}, nil, ErrScope, "not accessible to the parent installation"},
		{"server error", func(r *rig) App { return r.app }, []string{"app"}, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom", http.StatusBadGateway)
		}, ErrUpstream, "HTTP 502"},
		{"no token", func(r *rig) App { return r.app }, []string{"app"}, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"expires_at":"2030-01-01T00:00:00Z"}`)
		}, ErrUpstream, "no usable token"},
		{"expired token", func(r *rig) App { return r.app }, []string{"app"}, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"token":"ghs_x","expires_at":"2020-01-01T00:00:00Z"}`)
		}, ErrUpstream, "clock"},
		{"huge answer", func(r *rig) App { return r.app }, []string{"app"}, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			w.Write(make([]byte, maxResponseBody+10))
		}, ErrUpstream, "over"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			if c.serve != nil {
				r.srv.Config.Handler = c.serve
			}
			_, err := r.m.Token(t.Context(), c.app(r), c.repos, nil)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error = %v, want %v mentioning %q", err, c.want, c.msg)
			}
			if tok, err := r.m.Token(t.Context(), c.app(r), c.repos, nil); err == nil {
				t.Fatalf("a failed mint was cached: %+v", tok)
			}
		})
	}
}

// TestTokenNoRedirect: the JWT is never sent where a redirect points.
func TestTokenNoRedirect(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var leaked bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		leaked = req.Header.Get("Authorization") != ""
		r.gh.ServeHTTP(w, req)
	}))
	defer elsewhere.Close()
	r.srv.Config.Handler = http.RedirectHandler(elsewhere.URL+"/app/installations/77/access_tokens", http.StatusTemporaryRedirect)
	if _, err := r.m.Token(t.Context(), r.app, []string{"app"}, nil); !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), "HTTP 307") {
		t.Fatalf("a redirect: %v, want ErrUpstream", err)
	}
	if leaked || r.gh.requests != 0 {
		t.Fatal("the redirect was followed")
	}
}

func TestTokenRefusesScope(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, repos := range [][]string{nil, {"acme/app"}, {""}, {"a b"}, slices.Repeat([]string{"x"}, maxRepos+1)} {
		if _, err := r.m.Token(t.Context(), r.app, repos, nil); err == nil {
			t.Errorf("repos %q accepted", repos[:min(len(repos), 2)])
		}
	}
	if r.gh.requests != 0 {
		t.Fatalf("%d requests for refused scopes", r.gh.requests)
	}
}

func TestNewApp(t *testing.T) {
	t.Parallel()
	pkcs8, err := x509.MarshalPKCS8PrivateKey(testKey())
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	good := pemPKCS1(testKey())
	cases := []struct {
		name    string
		id      string
		inst    int64
		base    string
		key     []byte
		wantErr string
	}{
		{"pkcs1 numeric id", "12345", 1, "", good, ""},
		{"pkcs8 client id", "Iv23liAbC.x_y-z", 1, "https://ghe.example.com/api/v3/", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), ""},
		{"ec key", "1", 1, "", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}), "want RSA"},
		{"small key", "1", 1, "", pemPKCS1(small), "at least 2048"},
		{"not pem", "1", 1, "", []byte("ghp_abc"), "not PEM"},
		{"two blocks", "1", 1, "", append(slices.Clone(good), good...), "more than one"},
		{"certificate", "1", 1, "", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "CERTIFICATE"},
		{"bad id", "a/b", 1, "", good, "app id"},
		{"no installation", "1", 0, "", good, "installation id"},
		{"bad base", "1", 1, "ftp://x", good, "base url"},
	}
	for _, c := range cases {
		app, err := NewApp(c.id, c.inst, c.base, c.key)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr == "" && (app.Key == nil || strings.HasSuffix(app.BaseURL, "/") || app.BaseURL == ""):
			t.Errorf("%s: app %+v", c.name, app)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.wantErr)
		}
	}
}

func TestRepoOf(t *testing.T) {
	t.Parallel()
	cases := []struct{ url, owner, name string }{
		{"https://github.com/acme/app.git", "acme", "app"},
		{"https://github.com/acme/app", "acme", "app"},
		{"https://ghe.example.com/acme/lib.js/", "acme", "lib.js"},
		{"https://github.com/acme", "", ""},
		{"https://github.com/acme/app/tree/main", "", ""},
		{"https://github.com/acme/.git", "", ""},
	}
	for _, c := range cases {
		owner, name, err := RepoOf(c.url)
		if owner != c.owner || name != c.name || (err == nil) != (c.owner != "") {
			t.Errorf("RepoOf(%q) = %q, %q, %v; want %q, %q", c.url, owner, name, err, c.owner, c.name)
		}
	}
}
