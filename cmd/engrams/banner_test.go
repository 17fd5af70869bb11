package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBanner: dev's banner is short and says where it serves, the sign-in
// link (a field of its own: tests and users copy it), where the CLI config
// went and what the log shows.
func TestBanner(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ level, logs string }{
		{"warn", "warnings and errors (--log-level info or debug shows more)"},
		{"INFO", "what happens (--log-level debug shows the automation engine's internals too)"},
		{"debug", "everything, the automation engine's internals too"},
	} {
		var buf bytes.Buffer
		printBanner(&buf, banner{url: "http://127.0.0.1:7700", login: "http://127.0.0.1:7700/login#code=abc", config: "/c/config.json", data: "/d", logLevel: tt.level})
		want := `engrams dev is running at http://127.0.0.1:7700
  dashboard:  http://127.0.0.1:7700/login#code=abc  (signs this browser in: once, within 15 minutes)
  CLI config: /c/config.json  (its URL and token: engrams commands need no flags)
  data:       /d
  logs:       ` + tt.logs + `
Try: engrams session create
`
		if got := buf.String(); got != want {
			t.Errorf("level %s: banner\n%s\nwant\n%s", tt.level, got, want)
		}
		if !strings.Contains(" "+strings.Join(strings.Fields(buf.String()), " ")+" ", " http://127.0.0.1:7700/login#code=abc ") {
			t.Errorf("the sign-in link is not a field of its own")
		}
	}
}

func TestLibraryLogLevel(t *testing.T) {
	t.Parallel()
	for level, want := range map[string]string{"debug": "DEBUG", "DEBUG": "DEBUG", "info": "WARN", "warn": "WARN", "error": "WARN"} {
		if got := libraryLogLevel(level).String(); got != want {
			t.Errorf("libraryLogLevel(%q) = %s, want %s", level, got, want)
		}
	}
}
