package signin

import (
	"testing"
	"time"
)

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"/tasks/t1?tab=changes", "/tasks/t1?tab=changes"},
		{"", "/tasks"},
		{"https://evil.example/", "/tasks"},
		{"//evil.example/", "/tasks"},
		{"/\\evil.example", "/tasks"},
		{"/ok\r\nSet-Cookie: x=1", "/tasks"},
		{"tasks", "/tasks"},
	} {
		if got := safeNext(tt.in); got != tt.want {
			t.Errorf("safeNext(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUsedTokens(t *testing.T) {
	t.Parallel()
	var u usedTokens
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	if !u.take("a", now.Add(time.Hour), now) || u.take("a", now.Add(time.Hour), now.Add(time.Minute)) {
		t.Fatal("a token is taken once until it expires")
	}
	if !u.take("a", now.Add(3*time.Hour), now.Add(2*time.Hour)) {
		t.Fatal("an expired entry is forgotten (the verifier refuses the expired token itself)")
	}
	for i := range usedMax - 1 {
		u.take(string(rune(i+1000)), now.Add(time.Hour), now)
	}
	if u.take("full", now.Add(time.Hour), now) {
		t.Fatal("a full table of live tokens refuses rather than forgets one")
	}
	if !u.take("later", now.Add(5*time.Hour), now.Add(4*time.Hour)) {
		t.Fatal("once they expire, room is made")
	}
}

func TestNewRefusesHalfAProvider(t *testing.T) {
	t.Parallel()
	deps := Deps{Store: nil}
	if _, err := New(Config{}, deps); err == nil {
		t.Error("New without a store: want an error")
	}
	deps = Deps{Store: fakeStore{}, NewID: func() string { return "x" }}
	for _, c := range []Config{{Issuer: "https://idp"}, {Issuer: "https://idp", ClientID: "c"}} {
		if _, err := New(c, deps); err == nil {
			t.Errorf("New(%+v): want an error (client id and base URL are needed)", c)
		}
	}
	if _, err := New(Config{Issuer: "https://idp", ClientID: "c", BaseURL: "https://engrams"}, deps); err != nil {
		t.Error(err)
	}
}

// fakeStore is a Store that is never reached by these tests.
type fakeStore struct{ Store }
