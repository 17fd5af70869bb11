package ghapp

import (
	"testing"
	"unicode/utf8"
)

// FuzzParseTokenResponse: any answer decodes to a usable token or an
// error, never a panic, and a token holds only printable ASCII.
func FuzzParseTokenResponse(f *testing.F) {
	f.Add([]byte(`{"token":"ghs_abc","expires_at":"2030-01-01T00:00:00Z","permissions":{"contents":"write"},"repositories":[{"name":"app"}]}`))
	f.Add([]byte(`{"token":"","expires_at":"x"}`))
	f.Add([]byte(`{"token":"a\nb","expires_at":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tok, err := ParseTokenResponse(raw)
		if err != nil {
			return
		}
		if tok.Token == "" || tok.ExpiresAt.IsZero() || !utf8.ValidString(tok.Token) || len(tok.Repositories) > maxRepos {
			t.Fatalf("accepted %+v", tok)
		}
		for _, c := range tok.Token {
			if c <= ' ' || c > '~' {
				t.Fatalf("token %q has a byte a header cannot carry", tok.Token)
			}
		}
	})
}
