package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
)

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
func tokensText(in, out, cacheRead, cacheWrite int64) string {
	s := tokenCount(in) + " in"
	if cacheRead != 0 || cacheWrite != 0 {
		s += fmt.Sprintf(" (%s cache read, %s cache write)", tokenCount(cacheRead), tokenCount(cacheWrite))
	}
	return s + ", " + tokenCount(out) + " out"
}
