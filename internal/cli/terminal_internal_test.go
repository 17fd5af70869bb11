package cli

import (
	"strings"
	"testing"
)

func TestCleanText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain text stays", "hello\tworld\n", "hello\tworld\n"},
		{"unicode stays", "naïve — 日本 ✓ \uFFFD", "naïve — 日本 ✓ \uFFFD"},
		{"OSC 52 clipboard write", "x\x1b]52;c;ZXZpbA==\x07y", "x]52;c;ZXZpbA==y"},
		{"OSC 52 ended by ST", "x\x1b]52;c;ZXZpbA==\x1b\\y", "x]52;c;ZXZpbA==\\y"},
		{"CSI cursor moves and clear", "\x1b[2J\x1b[H\x1b[10;5Hover", "[2J[H[10;5Hover"},
		{"title set", "\x1b]0;pwned\x07ok", "]0;pwnedok"},
		{"BEL", "ding\x07\x07", "ding"},
		{"full reset ESC c", "\x1bcafter", "cafter"},
		{"carriage return and backspace", "safe\rEVIL\b\b", "safeEVIL"},
		{"other C0 and DEL", "\x00\x01\x0b\x0c\x7fz", "z"},
		{"C1 CSI in UTF-8", "\u009b31mred", "31mred"},
		{"C1 OSC and ST in UTF-8", "\u009d8;;http://x\u009clink", "8;;http://xlink"},
		{"C1 as raw 8-bit bytes", "\x9b31m\x9d", "\uFFFD31m\uFFFD"},
		{"invalid UTF-8", "a\xff\xfeb\xc3", "a\uFFFD\uFFFDb\uFFFD"},
		{"overlong encoding", "\xc0\xaf", "\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := cleanText(tt.in); got != tt.want {
				t.Errorf("cleanText(%q) = %q, want %q", tt.in, got, tt.want)
			}
			var b strings.Builder
			if n, err := (termSafe{&b}).Write([]byte(tt.in)); err != nil || n != len(tt.in) || b.String() != tt.want {
				t.Errorf("termSafe wrote %q (n %d, err %v), want %q", b.String(), n, err, tt.want)
			}
		})
	}
}
