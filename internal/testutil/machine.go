package testutil

import (
	"errors"
	"fmt"
	"testing"
)

// Machine is a state machine's spec, written in a test apart from the
// implementation: every state and event, and the legal moves (every pair
// not listed must be refused with ErrBad, leaving the state as it was).
type Machine[S, E ~string] struct {
	States     []S
	Events     []E
	Legal      map[S]map[E]S
	Transition func(S, E) (S, error)
	ErrBad     error
}

// CheckTransitions tests every (state, event) pair of m against its spec,
// and that the spec names every state and no event that nothing accepts
// (so it cannot drift into testing only refusals).
func CheckTransitions[S, E ~string](t *testing.T, m Machine[S, E]) {
	t.Helper()
	if len(m.Legal) != len(m.States) {
		t.Fatalf("the spec covers %d states, there are %d", len(m.Legal), len(m.States))
	}
	for _, ev := range m.Events {
		n := 0
		for _, moves := range m.Legal {
			if _, ok := moves[ev]; ok {
				n++
			}
		}
		if n == 0 {
			t.Errorf("event %s happens in no state of the spec", ev)
		}
	}
	for _, s := range m.States {
		for _, ev := range m.Events {
			t.Run(fmt.Sprintf("%s/%s", s, ev), func(t *testing.T) {
				t.Parallel()
				got, err := m.Transition(s, ev)
				want, ok := m.Legal[s][ev]
				switch {
				case ok && err != nil:
					t.Fatalf("Transition(%s, %s) refused: %v; want %s", s, ev, err, want)
				case ok && got != want:
					t.Fatalf("Transition(%s, %s) = %s, want %s", s, ev, got, want)
				case !ok && !errors.Is(err, m.ErrBad):
					t.Fatalf("Transition(%s, %s) = %s, %v; want %v", s, ev, got, err, m.ErrBad)
				case !ok && got != s:
					t.Fatalf("refused Transition(%s, %s) moved it to %s", s, ev, got)
				}
			})
		}
	}
}
