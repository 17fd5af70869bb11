package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
)

// printTaskEvent writes one conversation event for a person to read. What
// the agent wrote is shown through termSafe (on a terminal or not), so it
// cannot drive the terminal it is read on.
func printTaskEvent(w io.Writer, e apiv1.TaskEvent) {
	w = termSafe{w}
	var d map[string]any
	_ = json.Unmarshal(e.Data, &d)
	str := func(k string) string {
		if v, ok := d[k]; ok && v != nil {
			if s, ok := v.(string); ok {
				return s
			}
			b, _ := json.Marshal(v)
			return string(b)
		}
		return ""
	}
	ts := e.Time.Format("15:04:05")
	switch e.Type {
	case "prompt":
		fmt.Fprintf(w, "%s > %s\n", ts, indent(str("text")))
	case "assistant_text":
		fmt.Fprintf(w, "%s   %s\n", ts, indent(str("text")))
	case "tool_call":
		fmt.Fprintf(w, "%s   [tool] %s %s\n", ts, str("name"), cut(str("input"), 200))
	case "tool_result":
		mark := "ok"
		if d["is_error"] == true {
			mark = "error"
		}
		fmt.Fprintf(w, "%s   [tool %s] %s\n", ts, mark, cut(strings.TrimSpace(str("output")), 200))
	case "file_changed":
		fmt.Fprintf(w, "%s   [file %s] %s\n", ts, str("change"), str("path"))
	case "usage":
		fmt.Fprintf(w, "%s   [usage] %s\n", ts, usageLine(e.Usage))
	case "question":
		fmt.Fprintf(w, "%s ? %s\n", ts, indent(str("text")))
	case "error":
		fmt.Fprintf(w, "%s ! %s error: %s\n", ts, str("kind"), str("message"))
	case "setup_failed":
		fmt.Fprintf(w, "%s ! setup failed: %s\n", ts, str("message"))
	case "run_started":
		fmt.Fprintf(w, "%s   [%s %s, model %s]\n", ts, str("harness"), str("version"), str("model"))
	case "idle":
		fmt.Fprintf(w, "%s   [done]\n", ts)
	case "repo_cloned":
		fmt.Fprintf(w, "%s   [cloned %s at %s into %s]\n", ts, str("url"), cut(str("base"), 12), str("path"))
	case "session":
		fmt.Fprintf(w, "%s   [session %s]\n", ts, str("session_id"))
	case "stopped":
		fmt.Fprintf(w, "%s   [stopped]\n", ts)
	default:
		fmt.Fprintf(w, "%s   [%s] %s\n", ts, e.Type, cut(string(e.Data), 200))
	}
}

// indent continues a multi-line text under its first line.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n           ")
}

// usageLine says one usage event: model, tokens, cost and the price table
// it came from.
func usageLine(u *apiv1.TurnUsage) string {
	if u == nil {
		return "(unreadable)"
	}
	s := tokensText(u.TokenCounts) + " tokens"
	if u.Model != "" {
		s = u.Model + ": " + s
	}
	if u.Cost == nil {
		return s + ", not priced"
	}
	table := u.PriceTable
	if table == "harness" {
		table = "reckoned by the harness"
	}
	return s + ", " + money(u.Cost) + " (" + table + ")"
}
