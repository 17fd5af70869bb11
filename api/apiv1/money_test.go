package apiv1

import (
	"math"
	"testing"
)

func TestMicrosAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		micros int64
		want   string
	}{
		{0, "0"},
		{1, "0.000001"},
		{104, "0.000104"},
		{4575, "0.004575"},
		{1_500_000, "1.5"},
		{1_230_000, "1.23"},
		{12_000_000, "12"},
		{-250_000, "-0.25"},
		{math.MaxInt64, "9223372036854.775807"},
		{math.MinInt64, "-9223372036854.775808"},
	}
	for _, tt := range tests {
		if got := MicrosAmount(tt.micros); got != tt.want {
			t.Errorf("MicrosAmount(%d) = %q, want %q", tt.micros, got, tt.want)
		}
	}
}
