package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated table row.
func row(w io.Writer, cols ...any) {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = fmt.Sprint(c)
		if s[i] == "" {
			s[i] = "-"
		}
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

const timeLayout = "2006-01-02 15:04:05"

// when formats t in the configured location ("-" for the zero time).
func (a *app) when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(a.opts.Location).Format(timeLayout)
}

// whenAgo formats t with how long ago it was ("-" for the zero time).
func (a *app) whenAgo(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return a.when(t) + " (" + a.ago(t) + ")"
}

// ago says how long before now t was ("never" for the zero time).
func (a *app) ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := a.opts.Now().Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

// short renders JSON compactly on one line, cut to max runes.
func short(raw json.RawMessage, max int) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var buf bytes.Buffer
	s := string(raw)
	if json.Compact(&buf, raw) == nil {
		s = buf.String()
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

// listJSON is what every list command's --json prints: the items, never
// null, and the cursor of the next page, "" when there is none (the CLI
// reads every page unless a --limit stops it early).
type listJSON[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// printList prints items as a list command's --json.
func printList[T any](w io.Writer, items []T, next string) error {
	if items == nil {
		items = []T{}
	}
	return printJSON(w, listJSON[T]{Items: items, NextCursor: next})
}
