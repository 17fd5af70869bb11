package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

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
