package signin

import (
	"encoding/json"
	"slices"
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

// TestGroupNames: a groups claim is a list of names or one name; what is
// not a name is dropped, never a failed sign-in; absent or null keeps
// the member's groups as they are.
func TestGroupNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw  string
		want []string // nil: keep as they are
	}{
		{``, nil},
		{`null`, nil},
		{`[]`, []string{}},
		{`["eng","ops"]`, []string{"eng", "ops"}},
		{`"eng"`, []string{"eng"}},
		{`["eng",7,{"x":1},null,["a"]]`, []string{"eng"}},
		{`7`, []string{}},
		{`{"eng":true}`, []string{}},
	} {
		got := groupNames(json.RawMessage(c.raw))
		if (got == nil) != (c.want == nil) || (got != nil && !slices.Equal(*got, c.want)) {
			t.Errorf("groupNames(%s) = %v, want %v", c.raw, got, c.want)
		}
	}
}

func FuzzGroupNames(f *testing.F) {
	for _, s := range []string{`["eng"]`, `"x"`, `null`, `[1,"a"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Never a panic; names only from a claim that is JSON.
		if got := groupNames(raw); got != nil && len(*got) > 0 && !json.Valid(raw) {
			t.Fatalf("groupNames(%q) = %q from what is not JSON", raw, *got)
		}
	})
}
