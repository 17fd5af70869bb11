package guestapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

func entry(seq int64) guestapi.OutboxEntry {
	return guestapi.OutboxEntry{Seq: seq, ID: fmt.Sprintf("id-%d", seq), Kind: "test", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))}
}

func entries(seqs ...int64) []guestapi.OutboxEntry {
	out := make([]guestapi.OutboxEntry, 0, len(seqs))
	for _, s := range seqs {
		out = append(out, entry(s))
	}
	return out
}

// journalSeqs reads the seqs in the daemon's journal, in file order.
func journalSeqs(t *testing.T, work string) []int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(work, ".engrams-state", "outbox.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e guestapi.OutboxEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		out = append(out, e.Seq)
	}
	return out
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	c, work := startGuest(t)
	ctx := testCtx(t)
	if st, err := c.OutboxState(ctx); err != nil || st.Applied != 0 {
		t.Fatalf("fresh state = %+v, %v", st, err)
	}
	steps := []struct {
		name    string
		in      []guestapi.OutboxEntry
		want    int64
		journal []int64
	}{
		{"first two", entries(1, 2), 2, []int64{1, 2}},
		{"redelivery is skipped", entries(1, 2), 2, []int64{1, 2}},
		{"overlap applies only the new", entries(2, 3, 4), 4, []int64{1, 2, 3, 4}},
		{"gap applies nothing", entries(6, 7), 4, []int64{1, 2, 3, 4}},
		{"stops at a gap", entries(5, 7), 5, []int64{1, 2, 3, 4, 5}},
		{"empty", nil, 5, []int64{1, 2, 3, 4, 5}},
	}
	for _, s := range steps { // sequential: each step builds on the last
		st, err := c.Outbox(ctx, s.in)
		if err != nil || st.Applied != s.want {
			t.Fatalf("%s: Outbox = %+v, %v; want applied %d", s.name, st, err, s.want)
		}
		if got := journalSeqs(t, work); fmt.Sprint(got) != fmt.Sprint(s.journal) {
			t.Fatalf("%s: journal = %v, want %v", s.name, got, s.journal)
		}
	}
	if st, err := c.OutboxState(ctx); err != nil || st.Applied != 5 {
		t.Errorf("state = %+v, %v", st, err)
	}
}

func TestOutboxRejectsBadInput(t *testing.T) {
	t.Parallel()
	c, work := startGuest(t)
	ctx := testCtx(t)
	tests := []struct {
		name string
		in   []guestapi.OutboxEntry
	}{
		{"zero seq", []guestapi.OutboxEntry{{Seq: 0, ID: "a", Kind: "k"}}},
		{"decreasing", entries(2, 1)},
		{"duplicate", entries(1, 1)},
		{"no id", []guestapi.OutboxEntry{{Seq: 1, Kind: "k"}}},
		{"no kind", []guestapi.OutboxEntry{{Seq: 1, ID: "a"}}},
		{"bad after good", append(entries(1), guestapi.OutboxEntry{Seq: 2, ID: "b"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := c.Outbox(ctx, tt.in); !errors.Is(err, guestapi.ErrBadRequest) {
				t.Errorf("Outbox = %v, want ErrBadRequest", err)
			}
		})
	}
	t.Cleanup(func() { // after the parallel subtests: nothing was applied
		if got := journalSeqs(t, work); len(got) != 0 {
			t.Errorf("journal after bad input = %v, want empty", got)
		}
	})
}

// TestOutboxConcurrent delivers overlapping batches from many clients at
// once: every seq must be applied exactly once, in order.
func TestOutboxConcurrent(t *testing.T) {
	t.Parallel()
	c, work := startGuest(t)
	ctx := testCtx(t)
	const n = 40 // the batches reach seq n+3
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for s := int64(1); s <= n; s += 3 {
				lo := max(1, s-int64(w%3))
				if _, err := c.Outbox(ctx, entries(lo, lo+1, lo+2, lo+3)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st, err := c.Outbox(ctx, entries(seqRange(1, n+3)...))
	if err != nil || st.Applied != n+3 {
		t.Fatalf("final Outbox = %+v, %v", st, err)
	}
	if got, want := journalSeqs(t, work), seqRange(1, n+3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("journal = %v, want %v", got, want)
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestSync(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	if err := c.Sync(testCtx(t)); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}
