package githubapp

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestFile: a repository's file at a ref through the contents API; a
// file it lacks reads ""; paths that climb out, big files and bad
// repositories are refused.
func TestFile(t *testing.T) {
	t.Parallel()
	a, gh := newApp(t)
	gh.SetFile("acme/app", "abc123", "AGENTS.md", "# Rules\nReview for error handling.\n"+strings.Repeat("é", 40))
	gh.SetFile("acme/app", "abc123", "docs/big.txt", strings.Repeat("x", MaxFile+1))
	for _, c := range []struct {
		name, repo, ref, path, want, err string
	}{
		{"present", "acme/app", "abc123", "AGENTS.md", "# Rules\nReview for error handling.\n" + strings.Repeat("é", 40), ""},
		{"absent at that ref", "acme/app", "main", "AGENTS.md", "", ""},
		{"absent", "acme/app", "abc123", "CLAUDE.md", "", ""},
		{"too big", "acme/app", "abc123", "docs/big.txt", "", "over 65536 bytes"},
		{"a directory", "acme/app", "abc123", "docs", "", `docs is a "dir", not a file`},
		{"repository named dot-dot", "acme/..", "abc123", "AGENTS.md", "", "want a repository"},
		{"climbs out", "acme/app", "abc123", "../secrets", "", "want a repository"},
		{"no path", "acme/app", "abc123", "", "", "want a repository"},
		{"bad repository", "acme", "abc123", "AGENTS.md", "", "want a repository"},
	} {
		got, err := a.File(t.Context(), c.repo, c.ref, c.path)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case got != c.want:
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func FuzzDecodeFile(f *testing.F) {
	f.Add("file", "base64", int64(5), base64.StdEncoding.EncodeToString([]byte("hello")))
	f.Add("dir", "", int64(0), "")
	f.Fuzz(func(t *testing.T, typ, encoding string, size int64, content string) {
		text, err := decodeFile("f", typ, encoding, size, content)
		if err == nil && (len(text) > MaxFile || typ != "file") {
			t.Fatalf("%d bytes of a %q read", len(text), typ)
		}
	})
}
