package storetest

import (
	"testing"

	"github.com/engrams/engrams/internal/store"
)

// RunShared runs the checks that need two Store values on one database, as
// two coordinator replicas would have. open returns both; RunShared closes
// them.
func RunShared(t *testing.T, open func(t *testing.T) (store.Store, store.Store)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"ClaimOpAcrossInstances", func(t *testing.T, a, b store.Store) {
			ClaimConcurrently(t, []store.Store{a, b}, 4, 50)
		}},
		{"ClaimJobAcrossInstances", func(t *testing.T, a, b store.Store) {
			ClaimJobConcurrently(t, []store.Store{a, b}, 4, 10)
		}},
		{"TaskEventsAcrossInstances", func(t *testing.T, a, b store.Store) {
			AppendTaskEventsConcurrently(t, []store.Store{a, b}, 6, 20)
		}},
		{"TaskIngestQuotaAcrossInstances", func(t *testing.T, a, b store.Store) {
			IngestUnderQuotaConcurrently(t, []store.Store{a, b}, 6, 10)
		}},
		{"ProfileUpdateAcrossInstances", func(t *testing.T, a, b store.Store) {
			UpdateProfileConcurrently(t, []store.Store{a, b}, 6, 8)
		}},
		{"ReplaceSealedAcrossInstances", func(t *testing.T, a, b store.Store) {
			ReplaceSealedConcurrently(t, []store.Store{a, b}, 4, 6)
		}},
		{"NotifyAcrossInstances", func(t *testing.T, a, b store.Store) {
			NotifyAcross(t, a, b)
			NotifyAcross(t, b, a)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			t.Cleanup(func() {
				for _, st := range []store.Store{a, b} {
					if err := st.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				}
			})
			tc.fn(t, a, b)
		})
	}
}
