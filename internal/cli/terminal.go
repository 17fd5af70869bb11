package cli

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Bytes a guest or an image controls (diffs, files, warm-up output, error
// messages, event data) may hold terminal control sequences: a clipboard
// write (OSC 52), a title, cursor moves that repaint what was printed, a
// reset. Written to a terminal, they go through termSafe; written anywhere
// else (a pipe, a file) they stay exact, so scripts get the real bytes.
// `task show` always shows the conversation through it.

// termSafe writes text without its control characters: every C0 control
// but newline and tab (ESC, BEL, CR, backspace, ...), DEL and the C1
// controls (U+0080–U+009F, which some terminals obey as ESC sequences);
// bytes that are not UTF-8 become U+FFFD. What followed an ESC is shown as
// the plain text it is, so nothing the sender wrote is hidden. Each Write
// is cleaned on its own: callers write whole texts, not arbitrary slices.
type termSafe struct{ w io.Writer }

func (p termSafe) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, cleanText(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// cleanText is s as termSafe writes it.
func cleanText(s string) string {
	if safeForTerminal(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteRune(utf8.RuneError)
		case keepRune(r):
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func keepRune(r rune) bool {
	return r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f && (r < 0x80 || r > 0x9f))
}

// safeForTerminal reports whether s is valid UTF-8 holding only runes
// keepRune keeps.
func safeForTerminal(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !keepRune(r) {
			return false
		}
	}
	return true
}

// termOut returns w for guest- or image-controlled output: through
// termSafe when w is a terminal, else w itself.
func (a *app) termOut(w io.Writer) io.Writer {
	if _, tty := a.terminalFD(w); tty {
		return termSafe{w}
	}
	return w
}
