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

var outboxTests = []test{
	{"PutOutbox", testPutOutbox},
	{"PutOutboxRejected", testPutOutboxRejected},
	{"PutOutboxConcurrent", testPutOutboxConcurrent},
	{"MarkDelivered", testMarkDelivered},
	{"RollbackOutbox", testRollbackOutbox},
}

func testPutOutbox(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	var items []domain.OutboxItem
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		it, created, err := st.PutOutbox(ctx, domain.OutboxItem{SessionID: sess.ID, ID: fmt.Sprintf("p%d", i), Kind: "prompt",
			Payload: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i)), State: domain.OutboxDurable, DeliveredEpoch: 9, CreatedAt: at})
		must(t, err)
		if !created || it.Seq != int64(i+1) || it.State != domain.OutboxPending || it.DeliveredEpoch != 0 ||
			it.Kind != "prompt" || it.SessionID != sess.ID || it.ID != fmt.Sprintf("p%d", i) {
			t.Fatalf("item %d = %+v, created %v", i, it, created)
		}
		wantTime(t, "created_at", it.CreatedAt, at)
		wantTime(t, "delivered_at", it.DeliveredAt, time.Time{})
		items = append(items, it)
	}
	// A reused ID returns the existing item, whatever else differs.
	again, created, err := st.PutOutbox(ctx, domain.OutboxItem{SessionID: sess.ID, ID: "p1", Kind: "other",
		Payload: json.RawMessage(`{"x":1}`)})
	must(t, err)
	if created || fmt.Sprint(again) != fmt.Sprint(items[1]) {
		t.Fatalf("repeat put = %+v (created %v), want %+v", again, created, items[1])
	}
	// No gap after the repeat; IDs are per session.
	next := putItems(t, st, sess.ID, 1)[0]
	if next.Seq != 4 {
		t.Fatalf("seq after a repeat = %d, want 4", next.Seq)
	}
	other, _ := newSession(t, st)
	it, created, err := st.PutOutbox(ctx, domain.OutboxItem{SessionID: other.ID, ID: "p1", Kind: "prompt"})
	must(t, err)
	if !created || it.Seq != 1 || it.Payload != nil {
		t.Fatalf("other session's item = %+v, created %v", it, created)
	}
	cases := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4}},
		{1, 0, []int64{2, 3, 4}},
		{1, 2, []int64{2, 3}},
		{4, 5, nil},
	}
	for _, c := range cases {
		list, err := st.ListOutbox(ctx, sess.ID, c.after, c.limit)
		must(t, err)
		var seqs []int64
		for _, it := range list {
			seqs = append(seqs, it.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(c.want) {
			t.Errorf("ListOutbox(after %d, limit %d) = %v, want %v", c.after, c.limit, seqs, c.want)
		}
	}
	list, err := st.ListOutbox(ctx, sess.ID, 1, 1)
	must(t, err)
	if fmt.Sprint(list[0]) != fmt.Sprint(items[1]) {
		t.Fatalf("listed item = %+v, want %+v", list[0], items[1])
	}
	list, err = st.ListOutbox(ctx, newSID(), 0, 0)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("outbox of an unknown session = %+v", list)
	}
}

func testPutOutboxRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	cases := []struct {
		name string
		it   domain.OutboxItem
		want error // nil: any error
	}{
		{"unknown session", domain.OutboxItem{SessionID: newSID(), ID: "a", Kind: "prompt"}, store.ErrNotFound},
		{"no id", domain.OutboxItem{SessionID: sess.ID, Kind: "prompt"}, nil},
		{"no kind", domain.OutboxItem{SessionID: sess.ID, ID: "a"}, nil},
		{"bad payload", domain.OutboxItem{SessionID: sess.ID, ID: "a", Kind: "prompt", Payload: json.RawMessage(`{`)}, nil},
	}
	for _, c := range cases {
		_, _, err := st.PutOutbox(ctx, c.it)
		if err == nil || (c.want != nil && !errorsIs(err, c.want)) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
	}
	if it := putItems(t, st, sess.ID, 1)[0]; it.Seq != 1 {
		t.Fatalf("seq after rejected puts = %d, want 1", it.Seq)
	}
}

// testPutOutboxConcurrent: concurrent puts get gap-free seqs, and each ID is
// created once however many callers race on it.
func testPutOutboxConcurrent(t *testing.T, st store.Store) {
	sess, _ := newSession(t, st)
	const workers, each = 8, 20
	var mu sync.Mutex
	sharedSeq := map[string]map[int64]bool{}
	sharedCreated := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				for _, id := range []string{fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("shared-%d", i)} {
					it, created, err := st.PutOutbox(t.Context(), domain.OutboxItem{SessionID: sess.ID, ID: id, Kind: "prompt"})
					if err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					if sharedSeq[id] == nil {
						sharedSeq[id] = map[int64]bool{}
					}
					sharedSeq[id][it.Seq] = true
					if created {
						sharedCreated[id]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, seqs := range sharedSeq {
		if len(seqs) != 1 || sharedCreated[id] != 1 {
			t.Fatalf("item %s: seqs %v, created %d times", id, seqs, sharedCreated[id])
		}
	}
	list, err := st.ListOutbox(t.Context(), sess.ID, 0, 0)
	must(t, err)
	if len(list) != workers*each+each {
		t.Fatalf("items = %d, want %d", len(list), workers*each+each)
	}
	for i, it := range list {
		if it.Seq != int64(i+1) {
			t.Fatalf("item %d has seq %d: not gap-free", i, it.Seq)
		}
	}
}

func testMarkDelivered(t *testing.T, st store.Store) {
	ctx := t.Context()
	op, sess := claimedSession(t, st)
	putItems(t, st, sess.ID, 5)
	at := t0.Add(time.Minute)
	must(t, st.MarkDelivered(ctx, sess.ID, 3, op.Epoch, at))
	items := wantOutboxStates(t, st, sess.ID, domain.OutboxDelivered, domain.OutboxDelivered, domain.OutboxDelivered,
		domain.OutboxPending, domain.OutboxPending)
	for _, it := range items[:3] {
		if it.DeliveredEpoch != op.Epoch {
			t.Fatalf("item %d delivered epoch = %d, want %d", it.Seq, it.DeliveredEpoch, op.Epoch)
		}
		wantTime(t, "delivered_at", it.DeliveredAt, at)
	}
	// Already delivered items keep their first delivery.
	must(t, st.MarkDelivered(ctx, sess.ID, 4, op.Epoch, at.Add(time.Minute)))
	items = wantOutboxStates(t, st, sess.ID, domain.OutboxDelivered, domain.OutboxDelivered, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxPending)
	wantTime(t, "first delivered_at", items[0].DeliveredAt, at)
	wantTime(t, "fourth delivered_at", items[3].DeliveredAt, at.Add(time.Minute))
	// Stale or future epochs, and unknown sessions, change nothing.
	wantErr(t, st.MarkDelivered(ctx, sess.ID, 5, op.Epoch-1, at), store.ErrStaleEpoch)
	wantErr(t, st.MarkDelivered(ctx, sess.ID, 5, op.Epoch+1, at), store.ErrStaleEpoch)
	wantErr(t, st.MarkDelivered(ctx, newSID(), 5, 0, at), store.ErrNotFound)
	after := wantOutboxStates(t, st, sess.ID, domain.OutboxDelivered, domain.OutboxDelivered, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxPending)
	if fmt.Sprint(after) != fmt.Sprint(items) {
		t.Fatalf("rejected MarkDelivered changed items: %+v, was %+v", after, items)
	}
}

// testRollbackOutbox: a host is lost after the guest applied items 1-4 and
// a snapshot covered 1-2. The recovering op rolls 3-4 back to pending and
// delivers them again; durable items never roll back.
func testRollbackOutbox(t *testing.T, st store.Store) {
	ctx := t.Context()
	first, sess := claimedSession(t, st)
	putItems(t, st, sess.ID, 5)
	must(t, st.MarkDelivered(ctx, sess.ID, 4, first.Epoch, t0))
	must(t, st.CommitSnapshot(ctx, newSnapshot(sess.ID, 2, t0), first.Epoch))
	before := wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxPending)

	recoverOp, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpRecover, CreatedAt: t0}, true)
	must(t, err)
	second, _ := claimOnly(t, st, recoverOp.ID, t0)
	// The lost incarnation's epoch is fenced out.
	wantErr(t, st.RollbackOutbox(ctx, sess.ID, 2, first.Epoch), store.ErrStaleEpoch)
	wantErr(t, st.MarkDelivered(ctx, sess.ID, 5, first.Epoch, t0), store.ErrStaleEpoch)
	wantErr(t, st.RollbackOutbox(ctx, newSID(), 2, second.Epoch), store.ErrNotFound)
	unchanged := wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxPending)
	if fmt.Sprint(unchanged) != fmt.Sprint(before) {
		t.Fatalf("stale writes changed items: %+v, was %+v", unchanged, before)
	}

	// Even a rollback from before the snapshot leaves durable items alone.
	must(t, st.RollbackOutbox(ctx, sess.ID, 0, second.Epoch))
	items := wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxPending,
		domain.OutboxPending, domain.OutboxPending)
	for _, it := range items[2:4] {
		if it.DeliveredEpoch != 0 || !it.DeliveredAt.IsZero() {
			t.Fatalf("rolled-back item = %+v, want no delivery", it)
		}
	}
	redelivered := t0.Add(time.Hour)
	must(t, st.MarkDelivered(ctx, sess.ID, 5, second.Epoch, redelivered))
	items = wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxDelivered)
	if items[0].DeliveredEpoch != first.Epoch || items[2].DeliveredEpoch != second.Epoch {
		t.Fatalf("delivery epochs = %d, %d, want %d, %d", items[0].DeliveredEpoch, items[2].DeliveredEpoch, first.Epoch, second.Epoch)
	}
	wantTime(t, "redelivered_at", items[2].DeliveredAt, redelivered)
	// A rollback after a seq leaves the items up to it delivered.
	must(t, st.RollbackOutbox(ctx, sess.ID, 4, second.Epoch))
	wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxDelivered,
		domain.OutboxDelivered, domain.OutboxPending)
}
