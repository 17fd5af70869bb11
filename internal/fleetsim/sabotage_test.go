package fleetsim

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
)

// TestChecksCatchSabotage proves the invariant checks can fail: with a
// deliberately broken host, some seed must report the matching violation.
func TestChecksCatchSabotage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sabotage sabotage
		want     string
	}{
		{"hosts without self-fencing run a session twice", noSelfFence, "live on"},
		{"a snapshot naming a chunk never stored", dropChunk, "is missing"},
		{"a restore that loses an applied item", lossyRestore, "took effect 0 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var seen []string
			for seed := range uint64(40) {
				var bad []string
				synctest.Test(t, func(t *testing.T) {
					_, bad = runSeed(t, seed, t.TempDir(), options{steps: 60, longCrash: true, sabotage: tt.sabotage})
				})
				for _, b := range bad {
					if strings.Contains(b, tt.want) {
						t.Logf("seed %d caught it: %s", seed, b)
						return
					}
				}
				seen = append(seen, fmt.Sprintf("seed %d: %d other violations", seed, len(bad)))
			}
			t.Fatalf("no seed reported %q under sabotage %d: %v", tt.want, tt.sabotage, seen)
		})
	}
}
