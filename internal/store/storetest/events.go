package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var eventTests = []test{
	{"AppendEvent", testAppendEvent},
	{"AppendEventRejected", testAppendEventRejected},
	{"AppendEventConcurrent", testAppendEventConcurrent},
}

func testAppendEvent(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	for i := range 5 {
		e, err := st.AppendEvent(ctx, store.NewEvent{SessionID: sess.ID, Type: "log",
			Data: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i)), At: t0.Add(time.Duration(i) * time.Second)})
		must(t, err)
		if e.Seq != int64(i+2) || e.Type != "log" || e.SessionID != sess.ID {
			t.Fatalf("event %d = %+v", i, e)
		}
		wantTime(t, "created_at", e.CreatedAt, t0.Add(time.Duration(i)*time.Second))
	}
	// Fenced to the current epoch.
	op, claimed := claimOnly(t, st, create.ID, t0)
	e, err := st.AppendEvent(ctx, store.NewEvent{SessionID: sess.ID, Type: "fenced", Epoch: op.Epoch})
	must(t, err)
	if e.Seq != 7 || e.Data != nil {
		t.Fatalf("fenced event = %+v", e)
	}
	got, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	if got.EventSeq != 7 || got.Epoch != claimed.Epoch {
		t.Fatalf("session after appends = %+v", got)
	}
	cases := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4, 5, 6, 7}},
		{2, 0, []int64{3, 4, 5, 6, 7}},
		{2, 2, []int64{3, 4}},
		{7, 10, nil},
	}
	for _, c := range cases {
		list, err := st.ListEvents(ctx, sess.ID, c.after, c.limit)
		must(t, err)
		var seqs []int64
		for _, e := range list {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(c.want) {
			t.Errorf("ListEvents(after %d, limit %d) = %v, want %v", c.after, c.limit, seqs, c.want)
		}
	}
	list, err := st.ListEvents(ctx, sess.ID, 2, 1)
	must(t, err)
	wantJSON(t, "data", list[0].Data, json.RawMessage(`{"i": 1}`))
	list, err = st.ListEvents(ctx, newSID(), 0, 0)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("events of an unknown session = %+v", list)
	}
}

func testAppendEventRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	op, _ := claimOnly(t, st, create.ID, t0)
	cases := []struct {
		name string
		e    store.NewEvent
		want error // nil: any error
	}{
		{"stale epoch", store.NewEvent{SessionID: sess.ID, Type: "log", Epoch: op.Epoch + 1}, store.ErrStaleEpoch},
		{"unknown session", store.NewEvent{SessionID: newSID(), Type: "log"}, store.ErrNotFound},
		{"unknown session fenced", store.NewEvent{SessionID: newSID(), Type: "log", Epoch: 1}, store.ErrNotFound},
		{"no type", store.NewEvent{SessionID: sess.ID}, nil},
		{"bad json", store.NewEvent{SessionID: sess.ID, Type: "log", Data: json.RawMessage(`{`)}, nil},
	}
	for _, c := range cases {
		_, err := st.AppendEvent(ctx, c.e)
		if err == nil || (c.want != nil && !errorsIs(err, c.want)) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
	}
	got, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	if got.EventSeq != 1 {
		t.Fatalf("event_seq after rejected appends = %d, want 1", got.EventSeq)
	}
	// The next accepted event takes the next seq: no gap.
	e, err := st.AppendEvent(ctx, store.NewEvent{SessionID: sess.ID, Type: "log", Epoch: op.Epoch})
	must(t, err)
	if e.Seq != 2 {
		t.Fatalf("seq after rejected appends = %d, want 2", e.Seq)
	}
}

func testAppendEventConcurrent(t *testing.T, st store.Store) {
	sess, _ := newSession(t, st)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := st.AppendEvent(t.Context(), store.NewEvent{SessionID: sess.ID, Type: "log",
					Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := st.ListEvents(t.Context(), sess.ID, 0, 0)
	must(t, err)
	if len(list) != workers*each+1 {
		t.Fatalf("events = %d, want %d", len(list), workers*each+1)
	}
	for i, e := range list {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: not gap-free", i, e.Seq)
		}
	}
	got, err := st.GetSession(t.Context(), sess.ID)
	must(t, err)
	if got.EventSeq != int64(len(list)) {
		t.Fatalf("event_seq = %d, want %d", got.EventSeq, len(list))
	}
}

var egressTests = []test{
	{"AppendEgressEvents", testAppendEgress},
	{"AppendEgressEventsRejected", testAppendEgressRejected},
	{"EgressEventsKeepNewest", testEgressKeep},
	{"EgressEventsPageBound", testEgressPageBound},
	{"AppendEgressEventsConcurrent", testAppendEgressConcurrent},
}

// egressEvent is the i-th made-up event of a test: odd ones say their
// protocol and address, even ones do not (as a host before them sent).
func egressEvent(i int) domain.EgressEvent {
	e := domain.EgressEvent{At: t0.Add(time.Duration(i) * time.Second), Kind: "tls", Host: fmt.Sprintf("H%d.Example", i), Port: 443,
		Verdict: "allow", BytesUp: int64(i), BytesDown: int64(2 * i), Reason: fmt.Sprintf("r%d", i)}
	if i%2 == 1 {
		e.Proto, e.Addr = "tcp", fmt.Sprintf("2001:db8::%d", i)
	}
	return e
}

func egressBatch(from, n int) []domain.EgressEvent {
	out := make([]domain.EgressEvent, n)
	for i := range out {
		out[i] = egressEvent(from + i)
	}
	return out
}

func egressSeqs(evs []domain.EgressEvent) string {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	return fmt.Sprint(seqs)
}

func listEgress(t *testing.T, st store.Store, q store.EgressQuery) []domain.EgressEvent {
	t.Helper()
	evs, err := st.ListEgressEvents(t.Context(), q)
	must(t, err)
	return evs
}

func testAppendEgress(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	last, err := st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Events: egressBatch(1, 3), At: t0})
	must(t, err)
	if last != 3 {
		t.Fatalf("last seq = %d, want 3", last)
	}
	op, _ := claimOnly(t, st, create.ID, t0)
	dropped := domain.EgressEvent{At: t0, Kind: "dropped", Dropped: 12, Reason: "12 events over the rate"}
	last, err = st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Epoch: op.Epoch,
		Events: append(egressBatch(4, 2), dropped), At: t0.Add(time.Minute)})
	must(t, err)
	if last != 6 {
		t.Fatalf("last seq = %d, want 6", last)
	}
	if last, err = st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Epoch: op.Epoch}); err != nil || last != 6 {
		t.Fatalf("empty append = %d, %v; want the newest seq 6", last, err)
	}
	all := listEgress(t, st, store.EgressQuery{SessionID: sess.ID})
	if got := egressSeqs(all); got != "[6 5 4 3 2 1]" {
		t.Fatalf("newest first = %s", got)
	}
	first := all[5]
	want := egressEvent(1)
	if first.SessionID != sess.ID || first.Kind != want.Kind || first.Proto != "tcp" || first.Addr != want.Addr || first.Host != want.Host ||
		first.Port != want.Port || first.Verdict != want.Verdict ||
		first.BytesUp != want.BytesUp || first.BytesDown != want.BytesDown || first.Reason != want.Reason || first.Dropped != 0 {
		t.Fatalf("stored %+v, want %+v", first, want)
	}
	if second := all[4]; second.Proto != "" || second.Addr != "" || second.Host != "H2.Example" {
		t.Fatalf("an event without protocol and address reads back as %+v", second)
	}
	wantTime(t, "at", first.At, want.At)
	wantTime(t, "created_at", first.CreatedAt, t0)
	if d := all[0]; d.Kind != "dropped" || d.Dropped != 12 || d.Verdict != "" || d.Reason != dropped.Reason {
		t.Fatalf("dropped summary = %+v", d)
	}
	wantTime(t, "created_at", all[0].CreatedAt, t0.Add(time.Minute))
	cases := []struct {
		q    store.EgressQuery
		want string
	}{
		{store.EgressQuery{Limit: 2}, "[6 5]"},
		{store.EgressQuery{Before: 5, Limit: 2}, "[4 3]"},
		{store.EgressQuery{Before: 2}, "[1]"},
		{store.EgressQuery{Before: 1}, "[]"},
		{store.EgressQuery{Ascending: true}, "[1 2 3 4 5 6]"},
		{store.EgressQuery{Ascending: true, After: 4}, "[5 6]"},
		{store.EgressQuery{Ascending: true, After: 1, Limit: 2}, "[2 3]"},
		{store.EgressQuery{Ascending: true, After: 6}, "[]"},
	}
	for _, c := range cases {
		c.q.SessionID = sess.ID
		if got := egressSeqs(listEgress(t, st, c.q)); got != c.want {
			t.Errorf("ListEgressEvents(%+v) = %s, want %s", c.q, got, c.want)
		}
	}
	if got := listEgress(t, st, store.EgressQuery{SessionID: newSID()}); len(got) != 0 {
		t.Fatalf("events of an unknown session = %+v", got)
	}
}

func testAppendEgressRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	op, _ := claimOnly(t, st, create.ID, t0)
	cases := []struct {
		name string
		a    store.EgressAppend
		want error // nil: any error
	}{
		{"stale epoch", store.EgressAppend{SessionID: sess.ID, Epoch: op.Epoch + 1, Events: egressBatch(1, 2)}, store.ErrStaleEpoch},
		{"unknown session", store.EgressAppend{SessionID: newSID(), Events: egressBatch(1, 2)}, store.ErrNotFound},
		{"unknown session fenced", store.EgressAppend{SessionID: newSID(), Epoch: 1, Events: egressBatch(1, 2)}, store.ErrNotFound},
		{"no session", store.EgressAppend{Events: egressBatch(1, 2)}, nil},
	}
	for _, c := range cases {
		_, err := st.AppendEgressEvents(ctx, c.a)
		if err == nil || (c.want != nil && !errorsIs(err, c.want)) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
	}
	if got := listEgress(t, st, store.EgressQuery{SessionID: sess.ID}); len(got) != 0 {
		t.Fatalf("rejected appends wrote %s", egressSeqs(got))
	}
	// The next accepted batch takes the next seqs: no gap.
	last, err := st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Epoch: op.Epoch, Events: egressBatch(1, 2)})
	must(t, err)
	if last != 2 {
		t.Fatalf("last seq after rejected appends = %d, want 2", last)
	}
}

// testEgressKeep: a session keeps only its newest Keep events, whatever
// the batches; another session's are untouched.
func testEgressKeep(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	other, _ := newSession(t, st)
	_, err := st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: other.ID, Events: egressBatch(1, 5)})
	must(t, err)
	for i := range 5 {
		_, err := st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Events: egressBatch(i*7, 7), Keep: 10})
		must(t, err)
	}
	if got := egressSeqs(listEgress(t, st, store.EgressQuery{SessionID: sess.ID, Ascending: true})); got != "[26 27 28 29 30 31 32 33 34 35]" {
		t.Fatalf("kept %s, want the newest 10 (26 to 35)", got)
	}
	if got := egressSeqs(listEgress(t, st, store.EgressQuery{SessionID: other.ID})); got != "[5 4 3 2 1]" {
		t.Fatalf("the other session's events = %s", got)
	}
}

// testEgressPageBound: a page is at most MaxEgressPage events, whatever
// the limit asked.
func testEgressPageBound(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	for i := 0; i < store.MaxEgressPage+10; i += 256 {
		_, err := st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Events: egressBatch(i, min(256, store.MaxEgressPage+10-i))})
		must(t, err)
	}
	for _, limit := range []int{0, -1, store.MaxEgressPage + 1, 1 << 30} {
		for _, asc := range []bool{false, true} {
			got := listEgress(t, st, store.EgressQuery{SessionID: sess.ID, Limit: limit, Ascending: asc})
			if len(got) != store.MaxEgressPage {
				t.Errorf("limit %d (ascending %v): %d events, want %d", limit, asc, len(got), store.MaxEgressPage)
			}
		}
	}
	got := listEgress(t, st, store.EgressQuery{SessionID: sess.ID})
	if got[0].Seq != store.MaxEgressPage+10 || got[len(got)-1].Seq != 11 {
		t.Fatalf("newest page = %d..%d, want %d..11", got[0].Seq, got[len(got)-1].Seq, store.MaxEgressPage+10)
	}
}

func testAppendEgressConcurrent(t *testing.T, st store.Store) {
	sess, _ := newSession(t, st)
	const workers, each, batch = 6, 10, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, err := st.AppendEgressEvents(t.Context(), store.EgressAppend{SessionID: sess.ID, Events: egressBatch(w*1000+i*batch, batch), Keep: 1000}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list := listEgress(t, st, store.EgressQuery{SessionID: sess.ID, Ascending: true})
	if len(list) != workers*each*batch {
		t.Fatalf("events = %d, want %d", len(list), workers*each*batch)
	}
	for i, e := range list {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: not gap-free", i, e.Seq)
		}
		// A batch's events keep their order and stay together.
		if i%batch > 0 && e.BytesUp != list[i-1].BytesUp+1 {
			t.Fatalf("event %d (bytes_up %d) does not follow %d of its batch", i, e.BytesUp, list[i-1].BytesUp)
		}
	}
}
