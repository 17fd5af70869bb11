package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/engrams/engrams/internal/netpolicy"
)

// loopback is the dialer of tests whose registry is on 127.0.0.1.
func loopback() Dialer {
	return netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})
}

// TestPullRefusesBlockedRegistry: without an allowance a registry on
// loopback (by address or by a name resolving there) is refused before
// any request reaches it.
func TestPullRefusesBlockedRegistry(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); h.ServeHTTP(w, r) })
	})
	ref, _ := push(t, host, "app:1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "#!", 0o755))))
	hits.Store(0)
	_, port, _ := strings.Cut(host, ":")
	for _, tt := range []struct{ name, ref, want string }{
		{"address", ref, "127.0.0.1:" + port + " is blocked: loopback 127.0.0.0/8"},
		{"localhost", "localhost:" + port + "/app:1", "localhost resolves only to blocked addresses"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{}, Deps{}).Resolve(context.Background(), tt.ref, Credentials{})
			if !errors.Is(err, netpolicy.ErrBlocked) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("resolve %s: %v, want netpolicy.ErrBlocked with %q", tt.ref, err, tt.want)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the blocked registry got %d requests", n)
	}
	if _, err := New(Config{}, Deps{Dialer: loopback()}).Resolve(context.Background(), ref, Credentials{}); err != nil {
		t.Fatalf("resolve with loopback allowed: %v", err)
	}
}

// TestRegistryErrorsShowNoBody: what a registry writes in an error answer
// (or a token service in a bad token answer) never reaches the error a
// pull returns; the status, standard codes and category do, and the body
// is logged at debug.
func TestRegistryErrorsShowNoBody(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-FROM-THE-REGISTRY"
	tests := []struct {
		name    string
		answer  func(w http.ResponseWriter, r *http.Request) bool // true: answered
		want    []string
		wantErr error
	}{
		{"plain 500 body", func(w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, secret+"\nsecond line", http.StatusInternalServerError)
			return true
		}, []string{"the registry answered 500 Internal Server Error to GET"}, nil},
		{"structured 404 with a message", func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s","detail":"%s"},{"code":"%s","message":"x"}]}`, secret, secret, secret)
			return true
		}, []string{"not found in the registry: the registry answered 404 Not Found to GET (MANIFEST_UNKNOWN)"}, ErrNotFound},
		{"403 with html", func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<html>%s</html>", secret)
			return true
		}, []string{"registry refused the credentials: the registry answered 403 Forbidden"}, ErrUnauthorized},
		{"token answer without a token", func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/token" {
				fmt.Fprintf(w, `{"nothing":"%s"}`, secret)
				return true
			}
			if r.Header.Get("Authorization") == "" {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="s"`, r.Host))
				http.Error(w, unauthorizedBody, http.StatusUnauthorized)
				return true
			}
			return false
		}, []string{"no token in bearer response"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var on atomic.Bool
			host := newRegistry(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					// the ping (/v2/) is answered by the registry, but for the token flow
					if on.Load() && (r.URL.Path != "/v2/" || strings.HasPrefix(tt.name, "token")) && tt.answer(w, r) {
						return
					}
					h.ServeHTTP(w, r)
				})
			})
			ref, _ := push(t, host, "app:1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "#!", 0o755))))
			on.Store(true)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			_, err := New(Config{}, Deps{Dialer: loopback(), Logger: log}).Resolve(context.Background(), ref, Credentials{})
			if err == nil {
				t.Fatal("resolve succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, secret) || strings.Contains(msg, "\n") {
				t.Errorf("the error shows the registry's body: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q is not %v", msg, tt.wantErr)
			}
			if !strings.Contains(logs.String(), secret) {
				t.Errorf("the debug log lacks the registry's answer:\n%s", logs.String())
			}
		})
	}
}
