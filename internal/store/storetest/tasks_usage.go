package storetest

import (
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// usageEvent is a usage event at guest seq seq carrying u.
func usageEvent(seq int64, u domain.TurnUsage) domain.TaskEvent {
	return domain.TaskEvent{Type: "usage", Payload: []byte(`{"turn":"t1"}`), GuestSeq: seq, Usage: &u}
}

// testTaskUsage: a task sums the usage its events carry exactly when they
// are stored (a resend adds nothing), priced ones in the currency of the
// first, the rest counted as not priced; the run that started it is kept.
func testTaskUsage(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "usage")
	task := newTask(p)
	task.RunID = "run-7"
	got, err := st.CreateTask(ctx, task)
	must(t, err)
	if got.RunID != "run-7" || got.Usage != (domain.TaskUsage{}) {
		t.Fatalf("created task: run %q, usage %+v", got.RunID, got.Usage)
	}
	_, err = st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	usd := func(m int64) domain.Money { return domain.Money{Micros: m, Currency: "USD"} }
	sonnet := domain.TurnUsage{Model: "claude-sonnet-4-5", Tokens: domain.Tokens{Input: 2300, Output: 200, CacheRead: 2000, CacheWrite: 100},
		Cost: usd(4575), PriceTable: "engrams-2025-10"}
	first := []domain.TaskEvent{
		usageEvent(1, sonnet),
		{Type: "assistant_text", Payload: []byte(`{"text":"hi"}`), GuestSeq: 2},
		usageEvent(3, domain.TurnUsage{Model: "mystery", Tokens: domain.Tokens{Input: 10, Output: 1}}), // not priced
		usageEvent(4, domain.TurnUsage{}),                                                              // nothing used: not counted
	}
	ingest(t, st, task.ID, "s1", nil, first, 4, 1, 2, 3, 4)
	ingest(t, st, task.ID, "s1", nil, first, 4) // a resend
	_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{
		usageEvent(0, domain.TurnUsage{Tokens: domain.Tokens{Output: 5}, Cost: domain.Money{Micros: 9, Currency: "EUR"}}), // another currency
		usageEvent(0, domain.TurnUsage{Model: "claude-haiku-4-5", Tokens: domain.Tokens{Input: 1}, Cost: usd(1_000_001)}),
	})
	must(t, err)
	want := domain.TaskUsage{Model: "claude-haiku-4-5", Tokens: domain.Tokens{Input: 2311, Output: 206, CacheRead: 2000, CacheWrite: 100},
		Cost: usd(1_004_576), Unpriced: 2}
	got, err = st.GetTask(ctx, task.ID)
	must(t, err)
	if got.Usage != want || got.RunID != "run-7" {
		t.Fatalf("task usage %+v, run %q; want %+v, run-7", got.Usage, got.RunID, want)
	}
	list, err := st.ListTasks(ctx, domain.TaskFilter{ProfileID: p.ID})
	must(t, err)
	if len(list) != 1 || list[0].Usage != want {
		t.Fatalf("listed: %+v", list)
	}
}
