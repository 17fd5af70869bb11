package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/store"
)

var notifyTests = []test{
	{"NotifySubscribe", func(t *testing.T, st store.Store) { NotifyAcross(t, st, st) }},
	{"SubscribeEnds", testSubscribeEnds},
	{"Ready", testReady},
}

// NotifyAcross checks that Notify on from wakes a subscriber on to (which
// may be the same store, or another replica on the same database), that
// several notifies before a read still wake it, and other topics stay quiet.
func NotifyAcross(t *testing.T, from, to store.Store) {
	t.Helper()
	ctx := t.Context()
	// Fresh topics, so wake-ups still in flight from earlier calls on the
	// same database cannot interfere.
	topic, otherTopic := "ops:"+newID(), "session:"+newID()
	ch := to.Subscribe(ctx, topic)
	other := to.Subscribe(ctx, otherTopic)
	must(t, from.Notify(ctx, topic))
	wake(t, ch, "first notify")
	for range 3 {
		must(t, from.Notify(ctx, topic))
	}
	wake(t, ch, "coalesced notifies")
	// Only topic was notified so far; a wake-everything bug shows here.
	select {
	case <-other:
		t.Fatal("a notify on one topic woke another")
	default:
	}
	must(t, from.Notify(ctx, otherTopic))
	wake(t, other, "other topic")
}

func wake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
	case <-time.After(waitFor):
		t.Fatalf("%s: no wake-up within %v", what, waitFor)
	}
}

func testSubscribeEnds(t *testing.T, st store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	ch := st.Subscribe(ctx, "ops")
	keep := st.Subscribe(t.Context(), "ops")
	cancel()
	deadline := time.After(waitFor)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("channel not closed after its context ended")
		}
	}
	must(t, st.Notify(t.Context(), "ops"))
	wake(t, keep, "remaining subscriber")
}

// testReady: a migrated store is ready; a closed one is not.
func testReady(t *testing.T, st store.Store) {
	must(t, st.Ready(t.Context()))
	must(t, st.Close())
	if err := st.Ready(t.Context()); err == nil {
		t.Fatal("Ready of a closed store = nil")
	}
}
