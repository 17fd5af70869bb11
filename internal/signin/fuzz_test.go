package signin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// FuzzReadFlow feeds the flow cookie and the callback's state (both sent
// by the browser, so by anyone) to readFlow: it never panics, and a flow
// it accepts has every field and the query's state, and has not expired.
func FuzzReadFlow(f *testing.F) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(flow{State: "s", Nonce: "n", Verifier: "v", Next: "/tasks", Expires: now.Add(time.Minute)})
	f.Add(base64.RawURLEncoding.EncodeToString(good), "s")
	f.Add(base64.RawURLEncoding.EncodeToString(good), "other")
	f.Add("not base64!", "s")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"s":"","n":"n","v":"v"}`)), "")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"s":"s","n":"n","v":"v","exp":"2020-01-01T00:00:00Z"}`)), "s")
	s, err := New(Config{}, Deps{Store: fakeStore{}, NewID: func() string { return "x" }, Now: func() time.Time { return now }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cookie, state string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/auth/oidc/callback?state="+url.QueryEscape(state), nil)
		r.Header.Set("Cookie", flowCookie+"="+cookie)
		fl, err := s.readFlow(r)
		if err != nil {
			return
		}
		if fl.State != state || fl.Nonce == "" || fl.Verifier == "" || !now.Before(fl.Expires) {
			t.Fatalf("readFlow accepted %+v for state %q", fl, state)
		}
	})
}

// FuzzCLISignInBody feeds the CLI sign-in route any body: it never
// panics and answers 400 or 413 for what is not a sign-in (404 past the
// decoder, as this deployment has no provider), never a key.
func FuzzCLISignInBody(f *testing.F) {
	f.Add([]byte(`{"id_token":"a.b.c","name":"laptop","org":"o1"}`))
	f.Add([]byte(`{"id_token":""}`))
	f.Add([]byte(`{"id_token":"a","name":"bad name with spaces"}`))
	f.Add(bytes.Repeat([]byte("x"), cliBodyMax+1))
	f.Add([]byte(`[`))
	s, err := New(Config{}, Deps{Store: fakeStore{}, NewID: func() string { return "x" }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.cliSignIn(w, httptest.NewRequest(http.MethodPost, "/v1/auth/cli", bytes.NewReader(body)))
		switch w.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusNotFound:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}
