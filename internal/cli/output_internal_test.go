package cli

import (
	"math"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
)

func TestMoney(t *testing.T) {
	t.Parallel()
	usd := func(m int64) *apiv1.Money { return &apiv1.Money{Micros: m, Currency: "USD"} }
	tests := []struct {
		name string
		in   *apiv1.Money
		want string
	}{
		{"none", nil, "-"},
		{"no currency", &apiv1.Money{Micros: 5}, "-"},
		{"zero", usd(0), "$0.00"},
		{"one micro", usd(1), "$0.000001"},
		{"the float that was printed", usd(104), "$0.0001"},
		{"two significant digits", usd(4575), "$0.0046"},
		{"cents", usd(457_500), "$0.46"},
		{"a round cent", usd(10_000), "$0.01"},
		{"rounds up a digit", usd(9_999), "$0.01"},
		{"rounds to a dollar", usd(995_000), "$1.00"},
		{"a dollar", usd(1_000_000), "$1.00"},
		{"dollars and cents", usd(1_230_000), "$1.23"},
		{"half a cent up", usd(1_235_000), "$1.24"},
		{"thousands", usd(1_234_567_890), "$1,234.57"},
		{"millions", usd(12_345_678_000_000), "$12,345,678.00"},
		{"negative", usd(-250_000), "-$0.25"},
		{"largest", usd(math.MaxInt64), "$9,223,372,036,854.78"},
		{"euro", &apiv1.Money{Micros: 457_500, Currency: "EUR"}, "0.46 EUR"},
		{"yen", &apiv1.Money{Micros: 1_500_000_000, Currency: "JPY"}, "1,500.00 JPY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := money(tt.in); got != tt.want {
				t.Errorf("money(%+v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTokensText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, out, read, write int64
		want                 string
	}{
		{0, 0, 0, 0, "0 in, 0 out"},
		{25089, 25, 0, 0, "25,089 in, 25 out"},
		{2300, 200, 2000, 100, "2,300 in (2,000 cache read, 100 cache write), 200 out"},
		{1_234_567, 1000, 0, 7, "1,234,567 in (0 cache read, 7 cache write), 1,000 out"},
	}
	for _, tt := range tests {
		if got := tokensText(apiv1.TokenCounts{InputTokens: tt.in, OutputTokens: tt.out, CacheReadTokens: tt.read, CacheWriteTokens: tt.write}); got != tt.want {
			t.Errorf("tokensText(%d, %d, %d, %d) = %q, want %q", tt.in, tt.out, tt.read, tt.write, got, tt.want)
		}
	}
}
