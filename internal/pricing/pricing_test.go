package pricing

import (
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

func TestPrice(t *testing.T) {
	t.Parallel()
	table := Builtin()
	tests := []struct {
		name  string
		model string
		tok   domain.Tokens
		want  int64
		ok    bool
	}{
		{"sonnet plain", "claude-sonnet-4-5", domain.Tokens{Input: 1_000_000, Output: 1_000_000}, 18_000_000, true},
		{"sonnet with cache", "claude-sonnet-4-5", domain.Tokens{Input: 2300, Output: 200, CacheRead: 2000, CacheWrite: 100}, 4575, true},
		{"dated snapshot", "claude-sonnet-4-5-20250929", domain.Tokens{Output: 1}, 15, true},
		{"vertex snapshot", "claude-sonnet-4-5@20250929", domain.Tokens{Output: 1}, 15, true},
		{"latest", "claude-3-7-sonnet-latest", domain.Tokens{Output: 1}, 15, true},
		{"rounds half up", "gpt-5", domain.Tokens{Input: 2}, 3, true},   // 2.5 micros
		{"rounds down", "gpt-5-nano", domain.Tokens{Input: 9}, 0, true}, // 0.45 micros
		{"openai cached", "gpt-5", domain.Tokens{Input: 1000, CacheRead: 800}, 350, true},
		{"cache above input", "gpt-5", domain.Tokens{Input: 10, CacheRead: 800}, 100, true},
		{"negative counts", "gpt-5", domain.Tokens{Input: -5, Output: -1}, 0, true},
		{"bounded", "claude-opus-4-1", domain.Tokens{Output: 1 << 62}, 75_000_000_000, true},
		{"unknown", "claude-opus-5-5", domain.Tokens{Input: 10}, 0, false},
		{"not a prefix", "claude-sonnet-4-55", domain.Tokens{Input: 10}, 0, false},
		{"no date", "gpt-5-turbo", domain.Tokens{Input: 10}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := table.Price(tt.model, tt.tok)
			if ok != tt.ok || got.Micros != tt.want {
				t.Fatalf("Price(%q, %+v) = %+v, %v; want %d micros, %v", tt.model, tt.tok, got, ok, tt.want, tt.ok)
			}
			if ok && got.Currency != "USD" {
				t.Fatalf("currency %q", got.Currency)
			}
		})
	}
}

func TestBuiltinRatesExact(t *testing.T) {
	t.Parallel()
	r, ok := Builtin().Rates("claude-haiku-4-5")
	if !ok || r != (Rates{Input: 1_000_000, Output: 5_000_000, CacheRead: 100_000, CacheWrite: 1_250_000}) {
		t.Fatalf("haiku rates %+v %v", r, ok)
	}
	if r, _ := Builtin().Rates("gpt-5-nano"); r.CacheRead != 5_000 {
		t.Fatalf("gpt-5-nano cache read %d, want 5000", r.CacheRead)
	}
}
