package cli

import "testing"

func TestSayOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"get session X: get session X: not found (HTTP 404 not_found)", "get session X: not found (HTTP 404 not_found)"},
		{"get session X: session X not found (HTTP 404 not_found)", "get session X: session X not found (HTTP 404 not_found)"},
		{"resume session X: get session X: not found", "resume session X: get session X: not found"},
		{"a: a: a: b", "a: b"},
		{"list tasks: unknown task state", "list tasks: unknown task state"},
		{"plain", "plain"},
	} {
		if got := sayOnce(tt.in); got != tt.want {
			t.Errorf("sayOnce(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
