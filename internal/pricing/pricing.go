package pricing

import (
	"strings"

	"github.com/engrams/engrams/internal/domain"
)

// Rates are a model's prices in micro-units of the table's currency per
// million tokens: $3 per million input tokens is Input 3_000_000.
type Rates struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Table prices models' tokens in one currency. ID names the table and its
// version; every cost reckoned from it says it.
type Table struct {
	ID       string
	Currency string
	Models   map[string]Rates // by model name, without a date suffix
}

// BuiltinID is the id of Builtin's table.
const BuiltinID = "engrams-2025-10"

// Builtin is the providers' list prices (standard tier, 5-minute cache
// writes) as published in October 2025, in USD. A model missing here is
// not priced by the coordinator (the harness's own reckoning is kept).
func Builtin() Table {
	m := func(in, out, read, write float64) Rates {
		return Rates{Input: micros(in), Output: micros(out), CacheRead: micros(read), CacheWrite: micros(write)}
	}
	opus4, sonnet := m(15, 75, 1.5, 18.75), m(3, 15, 0.3, 3.75)
	gpt5, gpt41, o3 := m(1.25, 10, 0.125, 1.25), m(2, 8, 0.5, 2), m(2, 8, 0.5, 2)
	return Table{ID: BuiltinID, Currency: "USD", Models: map[string]Rates{
		"claude-opus-4-5": m(5, 25, 0.5, 6.25),
		"claude-opus-4-1": opus4, "claude-opus-4-0": opus4, "claude-opus-4": opus4,
		"claude-sonnet-4-5": sonnet, "claude-sonnet-4-0": sonnet, "claude-sonnet-4": sonnet,
		"claude-3-7-sonnet": sonnet, "claude-3-5-sonnet": sonnet,
		"claude-haiku-4-5": m(1, 5, 0.1, 1.25),
		"claude-3-5-haiku": m(0.8, 4, 0.08, 1),
		"gpt-5":            gpt5, "gpt-5-codex": gpt5,
		"gpt-5-mini":   m(0.25, 2, 0.025, 0.25),
		"gpt-5-nano":   m(0.05, 0.4, 0.005, 0.05),
		"gpt-4.1":      gpt41,
		"gpt-4.1-mini": m(0.4, 1.6, 0.1, 0.4),
		"gpt-4.1-nano": m(0.1, 0.4, 0.025, 0.1),
		"gpt-4o":       m(2.5, 10, 1.25, 2.5),
		"gpt-4o-mini":  m(0.15, 0.6, 0.075, 0.15),
		"o3":           o3,
		"o4-mini":      m(1.1, 4.4, 0.275, 1.1),
	}}
}

// micros is a price in dollars per million tokens as micro-dollars (the
// table's literals have at most three decimals: exact).
func micros(dollars float64) int64 { return int64(dollars*1e6 + 0.5) }

// MaxTokens bounds each count Price reckons with: no turn uses more, and
// every product stays far inside int64.
const MaxTokens = 1_000_000_000

// maxRate bounds a rate Price reckons with ($1,000,000 per million tokens).
const maxRate = 1_000_000_000_000

// Rates are the model's rates; ok is false when the table has none. A
// model matches its name, or its name with a date snapshot after it
// ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5@20250929") or
// "-latest".
func (t Table) Rates(model string) (Rates, bool) {
	if r, ok := t.Models[model]; ok {
		return r, true
	}
	base := strings.TrimSuffix(model, "-latest")
	if i := strings.LastIndexAny(base, "-@"); i > 0 && isDate(base[i+1:]) {
		base = base[:i]
	}
	r, ok := t.Models[base]
	return r, ok
}

func isDate(s string) bool {
	if len(s) != 8 && len(s) != 10 { // 20250929, 2025-04-14 after "-"
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Price is what the tokens of model cost: the sum over the kinds of
// token of count × rate, rounded to the nearest micro-unit. Input tokens
// not read from or written to the cache are priced as input; each count is
// taken within [0, MaxTokens]. ok is false when the table has no rates for
// the model.
func (t Table) Price(model string, tok domain.Tokens) (domain.Money, bool) {
	r, ok := t.Rates(model)
	if !ok || t.Currency == "" {
		return domain.Money{}, false
	}
	read, write := bound(tok.CacheRead), bound(tok.CacheWrite)
	plain := bound(tok.Input) - read - write
	if plain < 0 {
		plain = 0
	}
	total := perMillion(plain, r.Input).plus(perMillion(bound(tok.Output), r.Output)).
		plus(perMillion(read, r.CacheRead)).plus(perMillion(write, r.CacheWrite))
	return domain.Money{Micros: total.round(), Currency: t.Currency}, true
}

func bound(n int64) int64 { return min(max(n, 0), MaxTokens) }

// scaled is an amount in millionths of a micro-unit, kept as whole
// micro-units and the remainder so no product overflows.
type scaled struct{ whole, frac int64 }

func perMillion(tokens, rate int64) scaled {
	rate = min(max(rate, 0), maxRate)
	// tokens × rate / 1e6 = tokens × (rate / 1e6) + tokens × (rate % 1e6) / 1e6
	q, rem := rate/1_000_000, rate%1_000_000
	p := tokens * rem // ≤ 1e9 × 1e6
	return scaled{whole: tokens*q + p/1_000_000, frac: p % 1_000_000}
}

func (a scaled) plus(b scaled) scaled { return scaled{a.whole + b.whole, a.frac + b.frac} }

func (a scaled) round() int64 {
	w := a.whole + a.frac/1_000_000
	if a.frac%1_000_000 >= 500_000 {
		w++
	}
	return w
}
