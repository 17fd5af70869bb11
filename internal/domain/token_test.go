package domain

import (
	"testing"
	"time"
)

func TestTokenExpired(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	signin := Token{Kind: TokenSession, CreatedAt: t0, ExpiresAt: t0.Add(7 * 24 * time.Hour), IdleTimeout: 12 * time.Hour}
	used := signin
	used.LastUsedAt = t0.Add(6 * 24 * time.Hour)
	for _, tt := range []struct {
		name string
		tok  Token
		at   time.Time
		want bool
	}{
		{"a key without expiry", Token{Kind: TokenUser, CreatedAt: t0}, t0.Add(10 * 365 * 24 * time.Hour), false},
		{"a key before its expiry", Token{CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, t0.Add(59 * time.Minute), false},
		{"a key at its expiry", Token{CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, t0.Add(time.Hour), true},
		{"a sign-in used within its idle timeout", signin, t0.Add(11 * time.Hour), false},
		{"a sign-in idle for its timeout since it began", signin, t0.Add(12 * time.Hour), true},
		{"a sign-in idle since its last use", used, used.LastUsedAt.Add(12 * time.Hour), true},
		{"a sign-in in use, before its absolute end", used, used.LastUsedAt.Add(time.Hour), false},
		{"a sign-in in use, at its absolute end", used, signin.ExpiresAt, true},
	} {
		if got := tt.tok.Expired(tt.at); got != tt.want {
			t.Errorf("%s: Expired = %v, want %v", tt.name, got, tt.want)
		}
	}
}
