package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/engrams/engrams/api/apiv1"
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

// money formats an amount for a person: "$1,234.57" from a dollar up
// (cents), two significant digits below ("$0.46", "$0.0046", "$0.0001"),
// down to a micro-unit; a currency other than USD by its code after the
// amount ("0.46 EUR"). No amount is "-".
func money(m *apiv1.Money) string {
	if m == nil || m.Currency == "" {
		return "-"
	}
	s := microsText(m.Micros)
	if m.Currency == "USD" {
		if rest, neg := strings.CutPrefix(s, "-"); neg {
			return "-$" + rest
		}
		return "$" + s
	}
	return s + " " + m.Currency
}

// microsText is micros (millionths of a unit) as a decimal for a person:
// whole units with cents from 1 up, two significant digits below, at
// least two decimals.
func microsText(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-micros)
	}
	if u >= 1_000_000 {
		cents := (u + 5_000) / 10_000
		return fmt.Sprintf("%s%s.%02d", sign, thousands(cents/100), cents%100)
	}
	d, v := 2, uint64(0)
	for ; d <= 6; d++ { // the fewest decimals that keep two significant digits
		unit := pow10(6 - d)
		if v = (u + unit/2) / unit; v >= 10 || d == 6 {
			break
		}
	}
	s := fmt.Sprintf("%0*d", d+1, v)
	whole, frac := s[:len(s)-d], strings.TrimRight(s[len(s)-d:], "0")
	if len(frac) < 2 {
		frac += strings.Repeat("0", 2-len(frac))
	}
	if v >= pow10(d) { // 0.995 -> 1.00
		whole, frac = strconv.FormatUint(v/pow10(d), 10), "00"
	}
	return sign + whole + "." + frac
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// thousands is n with commas between groups of three digits.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// tokenCount is a count of tokens with thousands separators.
func tokenCount(n int64) string {
	if n < 0 {
		return "-" + thousands(uint64(-n))
	}
	return thousands(uint64(n))
}

// tokensText says input (with its cached parts) and output tokens.
func tokensText(t apiv1.TokenCounts) string {
	s := tokenCount(t.InputTokens) + " in"
	if t.CacheReadTokens != 0 || t.CacheWriteTokens != 0 {
		s += fmt.Sprintf(" (%s cache read, %s cache write)", tokenCount(t.CacheReadTokens), tokenCount(t.CacheWriteTokens))
	}
	return s + ", " + tokenCount(t.OutputTokens) + " out"
}
