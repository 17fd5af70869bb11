package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// minter is a hand-written Deps.SignIn: it counts sign-ins and sets a
// cookie as the real one does.
type minter struct {
	mu    sync.Mutex
	names []string
}

func (m *minter) signIn(w http.ResponseWriter, _ *http.Request) (apiv1.SignedIn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names = append(m.names, "signin")
	http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Value: "egr_secret", HttpOnly: true})
	return apiv1.SignedIn{UserID: "user-first-owner", OrgID: "org-first", Role: "owner"}, nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var testFiles = fstest.MapFS{
	"index.html":          {Data: []byte("<!doctype html><div id=app></div>")},
	"assets/app-1a2b.js":  {Data: []byte("console.log(1)")},
	"favicon.svg":         {Data: []byte("<svg/>")},
	"assets/nested/x.css": {Data: []byte("body{}")},
}

func newTest(t *testing.T, cfg Config) (*Dashboard, *minter, *clock, *httptest.Server) {
	t.Helper()
	m := &minter{}
	c := &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	d, err := newWith(cfg, Deps{SignIn: m.signIn, Now: c.Now}, testFiles)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(apiv1.PathPrefix, http.NotFoundHandler()) // the API's claim, as the server's
	d.Route(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return d, m, c, srv
}

func login(t *testing.T, srv *httptest.Server, body string) (int, apiv1.SignedIn, string) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/v1/dashboard/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out apiv1.SignedIn
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

func codeOf(t *testing.T, link string) string {
	t.Helper()
	_, c, ok := strings.Cut(link, "/login#code=")
	if !ok || len(c) < 30 {
		t.Fatalf("login link %q has no code", link)
	}
	return c
}

func TestLoginCodeWorksOnceAndExpires(t *testing.T) {
	t.Parallel()
	d, m, clk, srv := newTest(t, Config{LoginTTL: time.Minute, MaxCodes: 2})
	first := codeOf(t, d.LoginURL("http://127.0.0.1:7070"))
	if status, out, raw := login(t, srv, `{"code":"`+first+`"}`); status != 200 || out.UserID != "user-first-owner" {
		t.Fatalf("first use: %d %s", status, raw)
	}
	expired := codeOf(t, d.LoginURL(srv.URL))
	clk.add(2 * time.Minute)
	evicted := codeOf(t, d.LoginURL(srv.URL))
	codeOf(t, d.LoginURL(srv.URL))
	codeOf(t, d.LoginURL(srv.URL)) // three outstanding, two kept: evicted goes
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"a second use", `{"code":"` + first + `"}`, 401},
		{"an expired code", `{"code":"` + expired + `"}`, 401},
		{"a code pushed out by newer ones", `{"code":"` + evicted + `"}`, 401},
		{"an unknown code", `{"code":"nope"}`, 401},
		{"no code", `{}`, 400},
		{"not JSON", `code=1`, 400},
		{"an oversized body", `{"code":"` + strings.Repeat("a", 5000) + `"}`, 400},
	} {
		if status, _, raw := login(t, srv, tt.body); status != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, status, raw, tt.want)
		}
	}
	if len(m.names) != 1 {
		t.Errorf("signed in %d times, want once", len(m.names))
	}
}

func TestAppServesFilesAndDeepLinks(t *testing.T) {
	t.Parallel()
	_, _, _, srv := newTest(t, Config{})
	for _, tt := range []struct {
		method, path string
		status       int
		body, cache  string
	}{
		{"GET", "/", 200, "id=app", "no-cache"},
		{"GET", "/tasks/01a2-task", 200, "id=app", "no-cache"},
		{"GET", "/profiles/reviewer/edit", 200, "id=app", "no-cache"},
		{"GET", "/assets/app-1a2b.js", 200, "console.log", "immutable"},
		{"GET", "/favicon.svg", 200, "<svg/>", "no-cache"},
		{"GET", "/assets/missing.js", 404, "", ""},
		{"GET", "/missing.png", 404, "", ""},
		{"GET", "/../../etc/passwd", 200, "id=app", "no-cache"},
		{"POST", "/tasks", 405, "", ""},
		{"GET", "/v1/nothing", 404, "", ""}, // the API's, never the app
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(b.String(), tt.body) || !strings.Contains(resp.Header.Get("Cache-Control"), tt.cache) {
			t.Errorf("%s %s: %d %q cache %q, want %d %q %q", tt.method, tt.path, resp.StatusCode, b.String(), resp.Header.Get("Cache-Control"), tt.status, tt.body, tt.cache)
		}
		if tt.status == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: no content security policy", tt.path)
		}
	}
}
