package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// authRegistry serves one in-memory registry twice on 127.0.0.1: open (the tests push
// there) and guarded by wrap (the puller pulls there). It returns both host:ports.
func authRegistry(t *testing.T, wrap func(http.Handler) http.Handler) (open, guarded string) {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	o := httptest.NewServer(h)
	t.Cleanup(o.Close)
	g := httptest.NewServer(wrap(h))
	t.Cleanup(g.Close)
	return strings.TrimPrefix(o.URL, "http://"), strings.TrimPrefix(g.URL, "http://")
}

const unauthorizedBody = `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`

// requireBasic answers 401 with a Basic challenge unless the request carries user:pass.
func requireBasic(user, pass string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test-registry"`)
				http.Error(w, unauthorizedBody, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// tokenService is a registry token endpoint: it checks Basic credentials (or allows
// anonymous requests) and hands out one fixed token, recording what it was asked.
type tokenService struct {
	user, pass string
	anonymous  bool
	token      string

	mu     sync.Mutex
	asked  []string // "service scope"
	served int
}

func (s *tokenService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.asked = append(s.asked, r.URL.Query().Get("service")+" "+r.URL.Query().Get("scope"))
	s.mu.Unlock()
	u, p, ok := r.BasicAuth()
	if (ok && (u != s.user || p != s.pass)) || (!ok && !s.anonymous) {
		http.Error(w, `{"details":"incorrect username or password"}`, http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	s.served++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"token": s.token})
}

// requireBearer implements the registry side of the token flow: without the bearer
// token, 401 with a Bearer challenge naming the realm, service and scope. With
// realmHost empty the token service is served by the registry itself at /token.
func requireBearer(ts *tokenService, realmHost string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host := realmHost
			if host == "" {
				if r.URL.Path == "/token" {
					ts.ServeHTTP(w, r)
					return
				}
				host = r.Host
			}
			if r.Header.Get("Authorization") == "Bearer "+ts.token {
				h.ServeHTTP(w, r)
				return
			}
			ch := fmt.Sprintf(`Bearer realm="http://%s/token",service="test-registry"`, host)
			if repo, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/manifests/"); ok {
				ch += fmt.Sprintf(`,scope="repository:%s:pull"`, repo)
			} else if repo, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/blobs/"); ok {
				ch += fmt.Sprintf(`,scope="repository:%s:pull"`, repo)
			}
			w.Header().Set("WWW-Authenticate", ch)
			http.Error(w, unauthorizedBody, http.StatusUnauthorized)
		})
	}
}

// separateTokenHost serves ts on its own listener, named "localhost" (go-containerregistry
// refuses token realms at loopback or private IP literals other than the registry's own).
func separateTokenHost(t *testing.T, ts *tokenService) string {
	t.Helper()
	srv := httptest.NewServer(ts)
	t.Cleanup(srv.Close)
	return strings.Replace(strings.TrimPrefix(srv.URL, "http://"), "127.0.0.1", "localhost", 1)
}

func TestPullAuthentication(t *testing.T) {
	t.Parallel()
	basic := requireBasic("alice", "s3cret")
	newTS := func(anon bool) *tokenService {
		return &tokenService{user: "bob", pass: "hunter2", anonymous: anon, token: "tok-123"}
	}
	tests := []struct {
		name string
		wrap func(*testing.T, *tokenService) func(http.Handler) http.Handler
		anon bool // the token service serves anonymous requests
		auth Credentials
		want error // nil: the pull succeeds
		// checks on the token service after a successful pull
		wantAsked  bool
		wantServed bool
	}{
		{name: "basic, right credentials", auth: Credentials{Username: "alice", Password: "s3cret"}},
		{name: "basic, wrong password", auth: Credentials{Username: "alice", Password: "nope"}, want: ErrUnauthorized},
		{name: "basic, anonymous", want: ErrUnauthorized},
		{name: "basic, a token instead", auth: Credentials{Token: "tok-123"}, want: ErrUnauthorized},
		{name: "bearer, credentials exchanged for a token", wrap: sameHost,
			auth: Credentials{Username: "bob", Password: "hunter2"}, wantAsked: true, wantServed: true},
		{name: "bearer, wrong password", wrap: sameHost,
			auth: Credentials{Username: "bob", Password: "nope"}, want: ErrUnauthorized},
		{name: "bearer, anonymous refused", wrap: sameHost, want: ErrUnauthorized},
		{name: "bearer, anonymous allowed", wrap: sameHost, anon: true, wantAsked: true, wantServed: true},
		{name: "bearer, pre-issued token", wrap: sameHost, auth: Credentials{Token: "tok-123"}},
		{name: "bearer, wrong token", wrap: sameHost, auth: Credentials{Token: "tok-bad"}, want: ErrUnauthorized},
		{name: "bearer, token service on its own host", wrap: otherHost,
			auth: Credentials{Username: "bob", Password: "hunter2"}, wantAsked: true, wantServed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newTS(tc.anon)
			wrap := basic
			if tc.wrap != nil {
				wrap = tc.wrap(t, ts)
			}
			open, guarded := authRegistry(t, wrap)
			_, digest := push(t, open, "private/app:v1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "sh", 0o755))))
			img, err, target, parent := pullTo(t, newPuller(), guarded+"/private/app:v1", tc.auth)
			if tc.want != nil {
				t.Logf("err: %v", err)
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error shows a password: %v", err)
				}
				assertGone(t, target, parent)
				return
			}
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if img.Digest != digest || !img.HasShell {
				t.Errorf("digest %s shell %v, want %s", img.Digest, img.HasShell, digest)
			}
			ts.mu.Lock()
			defer ts.mu.Unlock()
			if tc.wantServed != (ts.served > 0) {
				t.Errorf("token service served %d tokens, want some: %v", ts.served, tc.wantServed)
			}
			if tc.wantAsked && !slices.Contains(ts.asked, "test-registry repository:private/app:pull") {
				t.Errorf("token service was asked %q, want service test-registry, scope repository:private/app:pull", ts.asked)
			}
		})
	}
}

func sameHost(_ *testing.T, ts *tokenService) func(http.Handler) http.Handler {
	return requireBearer(ts, "")
}

func otherHost(t *testing.T, ts *tokenService) func(http.Handler) http.Handler {
	return requireBearer(ts, separateTokenHost(t, ts))
}
