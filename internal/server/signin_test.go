package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/oidctest"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/signin"
	"github.com/engrams/engrams/internal/store"
)

// signinWorld is the API with sign-in over a real store, and a mock
// identity provider with a dashboard client and the CLI's public one.
type signinWorld struct {
	st  store.Store
	idp *oidctest.Provider
	srv *httptest.Server
}

var (
	ada   = oidctest.Identity{Subject: "s-ada", Email: "ada@example.com", Verified: true, Name: "Ada"}
	eve   = oidctest.Identity{Subject: "s-eve", Email: "eve@example.com", Verified: true}
	unver = oidctest.Identity{Subject: "s-ada2", Email: "ada@example.com", Verified: false}
)

func newSigninWorld(t *testing.T) *signinWorld {
	t.Helper()
	st := openSQLite(t)
	w := &signinWorld{st: st}
	mux := http.NewServeMux()
	w.srv = httptest.NewServer(mux)
	t.Cleanup(w.srv.Close)
	w.idp = oidctest.New(t, map[string]oidctest.Client{
		"dash": {Secret: "dash-secret", RedirectURIs: []string{w.srv.URL + "/v1/auth/oidc/callback"}},
		"cli":  {},
	})
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Images: &coordinatortest.Materializer{}}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := signin.New(signin.Config{Issuer: w.idp.URL, ClientID: "dash", ClientSecret: "dash-secret", CLIClientID: "cli", BaseURL: w.srv.URL},
		signin.Deps{Store: st, NewID: uuid.NewString})
	if err != nil {
		t.Fatal(err)
	}
	deps := p.APIDeps(st, nil)
	deps.SignIn = svc
	mux.Handle(apiv1.PathPrefix, api.New(api.Config{}, deps))
	ctx := t.Context()
	if err := st.CreateUser(ctx, domain.User{ID: "u-ada", Email: "ada@example.com", Name: "Ada"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMember(ctx, domain.FirstOrg, "u-ada", domain.RoleMember, time.Now()); err != nil {
		t.Fatal(err)
	}
	return w
}

// browser is a client with a cookie jar that stops at the dashboard's
// pages (the API here serves none).
func (w *signinWorld) browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if !strings.HasPrefix(req.URL.Path, "/v1/") && !strings.HasPrefix(req.URL.String(), w.idp.URL) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// cookie is the value of the browser's cookie named name.
func (w *signinWorld) cookie(c *http.Client, name string) string {
	u, _ := url.Parse(w.srv.URL)
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == name {
			return k.Value
		}
	}
	return ""
}

func send(t *testing.T, c *http.Client, method, u, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// beforeCallback is b stopping at the provider's redirect back.
func beforeCallback(b *http.Client) *http.Client {
	return &http.Client{Jar: b.Jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/v1/auth/oidc/callback") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// signIn walks the code flow: start, the provider, the callback.
func (w *signinWorld) signIn(t *testing.T, c *http.Client, next string) (int, string, http.Header) {
	return send(t, c, "GET", w.srv.URL+"/v1/auth/oidc/start?next="+url.QueryEscape(next), "", nil)
}

// TestOIDCSignIn: a member signs in with the provider (code + PKCE,
// state and nonce), the cookie works for reads and, with its anti-forgery
// header, for writes; sign-out revokes it server-side; every way a
// sign-in can be forged or stale is refused.
func TestOIDCSignIn(t *testing.T) {
	t.Parallel()
	w := newSigninWorld(t)
	b := w.browser(t)
	w.idp.SignIn(&ada)
	status, body, hdr := w.signIn(t, b, "/tasks/t1")
	if status != http.StatusFound || hdr.Get("Location") != "/tasks/t1" {
		t.Fatalf("sign-in ended %d at %q: %s", status, hdr.Get("Location"), body)
	}
	secret, csrf := w.cookie(b, apiv1.SessionCookie), w.cookie(b, apiv1.CSRFCookie)
	if !strings.HasPrefix(secret, "egr_") || csrf == "" {
		t.Fatalf("cookies after sign-in: session %q csrf %q", secret, csrf)
	}
	status, body, _ = send(t, b, "GET", w.srv.URL+"/v1/me", "", nil)
	if status != 200 || !strings.Contains(body, `"name":"ada@example.com"`) || !strings.Contains(body, `"role":"member"`) {
		t.Fatalf("/v1/me by cookie = %d %s", status, body)
	}
	// A write needs the anti-forgery header; a forged one is refused.
	write := w.srv.URL + "/v1/tokens"
	for _, tt := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no anti-forgery header", nil, http.StatusForbidden},
		{"a wrong one", map[string]string{apiv1.HeaderCSRF: "x" + csrf}, http.StatusForbidden},
		{"the cookie's", map[string]string{apiv1.HeaderCSRF: csrf}, http.StatusCreated},
	} {
		if status, body, _ := send(t, b, "POST", write, `{"name":"laptop"}`, tt.hdr); status != tt.want {
			t.Errorf("POST /v1/tokens by cookie with %s = %d %s, want %d", tt.name, status, body, tt.want)
		}
	}
	// A terminal opened by another site's page with this browser's cookie.
	ws := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	ws["Origin"] = "https://evil.example"
	if status, body, _ := send(t, b, "GET", w.srv.URL+"/v1/sessions/none/exec/ws", "", ws); status != http.StatusForbidden {
		t.Errorf("cross-site terminal by cookie = %d %s, want 403", status, body)
	}
	ws["Origin"] = w.srv.URL
	if status, body, _ := send(t, b, "GET", w.srv.URL+"/v1/sessions/none/exec/ws", "", ws); status != http.StatusNotFound {
		t.Errorf("same-site terminal by cookie = %d %s, want past authorization (404: no such session)", status, body)
	}
	// The sign-in's secret is a cookie, never a bearer key.
	plain := &http.Client{}
	if status, _, _ := send(t, plain, "GET", w.srv.URL+"/v1/me", "", map[string]string{"Authorization": "Bearer " + secret}); status != http.StatusUnauthorized {
		t.Errorf("the sign-in secret as a bearer key = %d, want 401", status)
	}
	// Sign-out needs the header too, then the cookie is refused by the API.
	if status, _, _ := send(t, b, "POST", w.srv.URL+"/v1/auth/signout", "", nil); status != http.StatusForbidden {
		t.Errorf("sign-out without the anti-forgery header = %d, want 403", status)
	}
	if status, body, _ := send(t, b, "POST", w.srv.URL+"/v1/auth/signout", "", map[string]string{apiv1.HeaderCSRF: csrf}); status != http.StatusNoContent {
		t.Fatalf("sign-out = %d %s", status, body)
	}
	if w.cookie(b, apiv1.SessionCookie) != "" {
		t.Errorf("sign-out left the cookie in the browser")
	}
	replay := map[string]string{"Cookie": apiv1.SessionCookie + "=" + secret}
	if status, body, _ := send(t, plain, "GET", w.srv.URL+"/v1/me", "", replay); status != http.StatusUnauthorized {
		t.Errorf("the signed-out cookie, replayed = %d %s, want 401", status, body)
	}
	// An API key is not a cookie.
	key := mintKey(t, w.st, "u-ada", domain.RoleMember)
	if status, _, _ := send(t, plain, "GET", w.srv.URL+"/v1/me", "", map[string]string{"Cookie": apiv1.SessionCookie + "=" + key}); status != http.StatusUnauthorized {
		t.Errorf("an API key as the sign-in cookie = %d, want 401", status)
	}
	audit, _ := w.st.ListAudit(t.Context(), domain.FirstOrg, nil, 100)
	var actions []string
	for _, e := range audit {
		if e.ActorID == "u-ada" {
			actions = append(actions, e.Action)
		}
	}
	if got := strings.Join(actions, ","); got != "signout,key.create,signin.oidc" {
		t.Errorf("audit log of ada = %s, want signout,key.create,signin.oidc (newest first)", got)
	}
}

// TestOIDCSignInRefusals: each forged or stale step of the code flow is
// refused, and sets no sign-in cookie.
func TestOIDCSignInRefusals(t *testing.T) {
	t.Parallel()
	w := newSigninWorld(t)
	cases := []struct {
		name string
		who  *oidctest.Identity
		run  func(t *testing.T, b *http.Client) (int, string)
		want int
		why  string // the refusal says
	}{
		{"a tampered state", &ada, func(t *testing.T, b *http.Client) (int, string) {
			stop := beforeCallback(b)
			_, _, hdr := send(t, stop, "GET", w.srv.URL+"/v1/auth/oidc/start", "", nil)
			u, _ := url.Parse(hdr.Get("Location"))
			q := u.Query()
			q.Set("state", q.Get("state")+"x")
			u.RawQuery = q.Encode()
			s, body, _ := send(t, stop, "GET", u.String(), "", nil)
			return s, body
		}, http.StatusBadRequest, "not started in this browser"},
		{"a callback this browser did not start", &ada, func(t *testing.T, b *http.Client) (int, string) {
			s, body, _ := send(t, b, "GET", w.srv.URL+"/v1/auth/oidc/callback?state=abc&code=def", "", nil)
			return s, body
		}, http.StatusBadRequest, "not started in this browser"},
		{"the provider's refusal, with markup in it", &ada, func(t *testing.T, b *http.Client) (int, string) {
			stop := beforeCallback(b)
			_, _, hdr := send(t, stop, "GET", w.srv.URL+"/v1/auth/oidc/start", "", nil)
			u, _ := url.Parse(hdr.Get("Location"))
			q := u.Query()
			q.Del("code")
			q.Set("error", "access_denied")
			q.Set("error_description", "<script>alert(1)</script>")
			u.RawQuery = q.Encode()
			s, body, _ := send(t, stop, "GET", u.String(), "", nil)
			if strings.Contains(body, "<script>") {
				t.Errorf("the provider's words were rendered as markup: %s", body)
			}
			return s, body
		}, http.StatusUnauthorized, "access_denied &lt;script&gt;"},
		{"a wrong nonce", &ada, func(t *testing.T, b *http.Client) (int, string) {
			w.idp.WrongNonce(true)
			defer w.idp.WrongNonce(false)
			s, body, _ := w.signIn(t, b, "/")
			return s, body
		}, http.StatusUnauthorized, "nonce mismatch"},
		{"an expired code", &ada, func(t *testing.T, b *http.Client) (int, string) {
			stop := beforeCallback(b)
			_, _, hdr := send(t, stop, "GET", w.srv.URL+"/v1/auth/oidc/start", "", nil) // stops at the provider's redirect back
			w.idp.ExpireCodes()
			s, body, _ := send(t, stop, "GET", hdr.Get("Location"), "", nil)
			return s, body
		}, http.StatusUnauthorized, "refused the code"},
		{"nobody signed in at the provider", nil, func(t *testing.T, b *http.Client) (int, string) {
			s, body, _ := w.signIn(t, b, "/")
			return s, body
		}, http.StatusUnauthorized, "login_required"},
		{"an email that is no member's", &eve, func(t *testing.T, b *http.Client) (int, string) {
			s, body, _ := w.signIn(t, b, "/")
			return s, body
		}, http.StatusForbidden, "engrams member add eve@example.com"},
		{"an unverified email", &unver, func(t *testing.T, b *http.Client) (int, string) {
			s, body, _ := w.signIn(t, b, "/")
			return s, body
		}, http.StatusForbidden, "no verified email"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) { // not parallel: the provider's knobs are shared
			w.idp.SignIn(tt.who)
			b := w.browser(t)
			status, body := tt.run(t, b)
			if status != tt.want || !strings.Contains(body, "Sign-in failed") || !strings.Contains(body, tt.why) {
				t.Errorf("%s: %d %q, want %d and a refusal saying %q", tt.name, status, body, tt.want, tt.why)
			}
			if c := w.cookie(b, apiv1.SessionCookie); c != "" {
				t.Errorf("%s set a sign-in cookie", tt.name)
			}
		})
	}
}

// TestCLISignIn: an ID token from the device flow's client, fresh and
// unused, is traded for a personal key; anything else is refused.
func TestCLISignIn(t *testing.T) {
	t.Parallel()
	w := newSigninWorld(t)
	plain := &http.Client{}
	trade := func(tok string) (int, string) {
		body, _ := json.Marshal(apiv1.CLISignInRequest{IDToken: tok, Name: "laptop"})
		s, out, _ := send(t, plain, "POST", w.srv.URL+"/v1/auth/cli", string(body), nil)
		return s, out
	}
	now := time.Now()
	good := w.idp.IDToken("cli", ada, "", now)
	status, out := trade(good)
	var got apiv1.CreateTokenResponse
	_ = json.Unmarshal([]byte(out), &got)
	if status != http.StatusCreated || got.Token.Role != "member" || got.Token.ExpiresAt.IsZero() || !strings.HasPrefix(got.Secret, "egr_") {
		t.Fatalf("trade a fresh ID token = %d %s", status, out)
	}
	if s, body, _ := send(t, plain, "GET", w.srv.URL+"/v1/me", "", map[string]string{"Authorization": "Bearer " + got.Secret}); s != 200 || !strings.Contains(body, "ada@example.com") {
		t.Fatalf("the CLI's key: /v1/me = %d %s", s, body)
	}
	for _, tt := range []struct {
		name string
		tok  string
		want int
	}{
		{"the same ID token again", good, http.StatusUnauthorized},
		{"an old one", w.idp.IDToken("cli", ada, "", now.Add(-20*time.Minute)), http.StatusUnauthorized},
		{"one for another client", w.idp.IDToken("dash", ada, "", now), http.StatusUnauthorized},
		{"a tampered one", good[:len(good)-4] + "AAAA", http.StatusUnauthorized},
		{"a stranger's", w.idp.IDToken("cli", eve, "", now), http.StatusForbidden},
		{"an unverified email", w.idp.IDToken("cli", unver, "", now), http.StatusForbidden},
	} {
		if s, body := trade(tt.tok); s != tt.want {
			t.Errorf("trade %s = %d %s, want %d", tt.name, s, body, tt.want)
		}
	}
	if s, _, _ := send(t, plain, "POST", w.srv.URL+"/v1/auth/cli", `{"id_token":"`+strings.Repeat("a", 20<<10)+`"}`, nil); s != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized CLI sign-in = %d, want 413", s)
	}
	if s, body, _ := send(t, plain, "GET", w.srv.URL+"/v1/auth/config", "", nil); s != 200 || !strings.Contains(body, `"device_authorization_endpoint":"`+w.idp.URL) || !strings.Contains(body, `"cli_client_id":"cli"`) {
		t.Errorf("auth config = %d %s", s, body)
	}
}

// mintKey makes a personal key of user in the first organisation.
func mintKey(t *testing.T, st store.Store, user domain.UserID, role domain.Role) string {
	t.Helper()
	secret, prefix := access.NewSecret()
	if err := st.CreateToken(t.Context(), domain.Token{ID: uuid.NewString(), Name: "k", Kind: domain.TokenUser, OrgID: domain.FirstOrg,
		UserID: user, Role: role, Prefix: prefix, Hash: access.HashSecret(secret), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// TestCLILoginByDeviceFlow: `engrams login` runs the provider's device
// flow (the person approves the printed code), trades the ID token for a
// key and saves it; `engrams whoami` then acts as them. `--key` checks a
// pasted key before saving it.
func TestCLILoginByDeviceFlow(t *testing.T) {
	t.Parallel()
	w := newSigninWorld(t)
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	env := func(k string) string {
		if k == "ENGRAMS_CONFIG" {
			return cfgPath
		}
		return ""
	}
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		errR, errW := io.Pipe()
		var stdout bytes.Buffer
		root := cli.NewRoot(cli.Options{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: errW, Getenv: env})
		root.SetArgs(args)
		code := make(chan int, 1)
		go func() {
			code <- cli.Execute(t.Context(), root)
			errW.Close()
		}()
		var stderr strings.Builder
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			line := sc.Text()
			stderr.WriteString(line + "\n")
			if c, ok := strings.CutPrefix(line, "and enter the code "); ok && !w.idp.Approve(c, ada) {
				t.Errorf("the code %q the CLI printed is not pending at the provider", c)
			}
		}
		return <-code, stdout.String(), stderr.String()
	}
	code, out, errs := run("", "login", "--url", w.srv.URL, "--name", "laptop")
	if code != 0 || !strings.Contains(out, "Signed in as ada@example.com (member in default); key laptop, expires") {
		t.Fatalf("engrams login = %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	code, out, errs = run("", "whoami")
	if code != 0 || !strings.HasPrefix(out, "ada@example.com: member in default") {
		t.Fatalf("engrams whoami after login = %d %s %s", code, out, errs)
	}
	// A pasted key: checked, then saved; a bad one is refused and not saved.
	key := mintKey(t, w.st, domain.FirstOwner, domain.RoleOwner)
	if code, out, errs := run("nope\n", "login", "--url", w.srv.URL, "--key"); code == 0 || !strings.Contains(errs, "check the key") {
		t.Fatalf("login with a bad key = %d %s %s", code, out, errs)
	}
	if _, out, _ := run("", "whoami"); !strings.HasPrefix(out, "ada@example.com") {
		t.Fatalf("a refused key replaced the saved one: whoami = %s", out)
	}
	if code, out, errs := run(key+"\n", "login", "--url", w.srv.URL, "--key"); code != 0 || !strings.Contains(out, "owner in default") {
		t.Fatalf("login with a pasted key = %d %s %s", code, out, errs)
	}
}

// TestOIDCSignInKeepsTheProvidersGroups: the groups the provider sends
// become the member's (malformed and repeated names dropped), and a
// profile granted to one of them is the member's to use; one granted to
// no group of theirs stays out of sight.
func TestOIDCSignInKeepsTheProvidersGroups(t *testing.T) {
	t.Parallel()
	w := newSigninWorld(t)
	ctx := t.Context()
	for name, grants := range map[string][]domain.Grant{
		"for-eng": {{Kind: domain.GrantGroup, Subject: "eng"}},
		"for-ops": {{Kind: domain.GrantGroup, Subject: "ops"}},
		"admins":  nil,
	} {
		if _, err := w.st.CreateProfile(ctx, domain.Profile{ID: domain.ProfileID("p-" + name), Org: domain.FirstOrg, Name: name, Spec: []byte(`{}`), Grants: grants}); err != nil {
			t.Fatal(err)
		}
	}
	b := w.browser(t)
	inGroups := ada
	inGroups.Groups = []string{"eng", "", "eng", strings.Repeat("x", domain.MaxGroupName+1)}
	w.idp.SignIn(&inGroups)
	if status, body, _ := w.signIn(t, b, "/"); status != http.StatusFound {
		t.Fatalf("sign-in = %d %s", status, body)
	}
	m, err := w.st.GetMember(ctx, domain.FirstOrg, "u-ada")
	if err != nil || !slices.Equal(m.Groups, []string{"eng"}) {
		t.Fatalf("groups after sign-in = %q, %v", m.Groups, err)
	}
	log, err := w.st.ListAudit(ctx, domain.FirstOrg, nil, 100)
	if err != nil || slices.IndexFunc(log, func(e domain.AuditEvent) bool {
		return e.Action == "member.groups_from_provider" && e.TargetID == "u-ada" && e.ActorKind == "system"
	}) < 0 {
		t.Errorf("the provider's groups change is not in the audit log: %+v, %v", log, err)
	}
	status, body, _ := send(t, b, "GET", w.srv.URL+"/v1/profiles", "", nil)
	if status != 200 || !strings.Contains(body, `"name":"for-eng"`) || strings.Contains(body, "for-ops") || strings.Contains(body, `"admins"`) {
		t.Fatalf("a member of eng lists profiles: %d %s", status, body)
	}
	if status, _, _ := send(t, b, "GET", w.srv.URL+"/v1/profiles/for-ops", "", nil); status != http.StatusNotFound {
		t.Errorf("a member of eng reads a profile granted to ops: %d, want 404", status)
	}
}
