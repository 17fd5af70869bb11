package storetest

import (
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

var readinessTests = []test{
	{"CountSessionsByState", testCountSessionsByState},
	{"Ready", testReady},
}

func testCountSessionsByState(t *testing.T, st store.Store) {
	ctx := t.Context()
	got, err := st.CountSessionsByState(ctx)
	must(t, err)
	wantSame(t, "counts of an empty store", got, map[domain.SessionState]int{})
	for i := range 3 {
		sess, op := newSession(t, st)
		if i == 2 {
			continue // stays created (its op is claimed last)
		}
		_, sess = claimOnly(t, st, op.ID, t0)
		host := domain.HostID("host-a")
		sess = transition(t, st, sess, lifecycle.Place, &host)
		if i == 1 {
			transition(t, st, sess, lifecycle.StartFailed, nil)
		}
	}
	got, err = st.CountSessionsByState(ctx)
	must(t, err)
	wantSame(t, "counts", got, map[domain.SessionState]int{
		domain.SessionCreated: 1, domain.SessionStarting: 1, domain.SessionDead: 1,
	})
}

// testReady: a migrated store is ready; a closed one is not.
func testReady(t *testing.T, st store.Store) {
	must(t, st.Ready(t.Context()))
	must(t, st.Close())
	if err := st.Ready(t.Context()); err == nil {
		t.Fatal("Ready of a closed store = nil")
	}
}
