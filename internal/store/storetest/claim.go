package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var claimTests = []test{
	{"ClaimOp", testClaimOp},
	{"ClaimOpLeaseExpiry", testClaimOpLeaseExpiry},
	{"ClaimOpConcurrent", func(t *testing.T, st store.Store) { ClaimConcurrently(t, []store.Store{st}, 8, 50) }},
}

func testClaimOp(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, _, err := st.ClaimOp(ctx, "w", t0, time.Minute)
	wantErr(t, err, store.ErrNoOp)
	// Oldest first, whatever the insert order.
	late, lateOp := newSession(t, st)
	early, _ := newSession(t, st)
	op, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: early.ID, Kind: domain.OpEvict, CreatedAt: t0.Add(-time.Hour)}, true)
	must(t, err)
	now := t0.Add(time.Second)
	claimed, sess, err := st.ClaimOp(ctx, "w1", now, time.Minute)
	must(t, err)
	if claimed.ID != op.ID || sess.ID != early.ID {
		t.Fatalf("claimed %s of %s, want the oldest op %s", claimed.ID, sess.ID, op.ID)
	}
	if claimed.State != domain.OpRunning || claimed.ClaimedBy != "w1" || claimed.Attempts != 1 ||
		claimed.Epoch != 1 || sess.Epoch != 1 {
		t.Fatalf("claimed op = %+v, session epoch %d", claimed, sess.Epoch)
	}
	wantTime(t, "lease_until", claimed.LeaseUntil, now.Add(time.Minute))
	got, err := st.GetOp(ctx, op.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(claimed) {
		t.Fatalf("GetOp = %+v, ClaimOp returned %+v", got, claimed)
	}
	gotSess, err := st.GetSession(ctx, early.ID)
	must(t, err)
	if fmt.Sprint(gotSess) != fmt.Sprint(sess) {
		t.Fatalf("GetSession = %+v, ClaimOp returned %+v", gotSess, sess)
	}
	second, sess, err := st.ClaimOp(ctx, "w2", now, time.Minute)
	must(t, err)
	if second.ID != lateOp.ID || sess.ID != late.ID || second.Epoch != 1 {
		t.Fatalf("second claim = %+v", second)
	}
	_, _, err = st.ClaimOp(ctx, "w3", now, time.Minute)
	wantErr(t, err, store.ErrNoOp)
	// Each claim bumps the epoch by one.
	must(t, st.FinishOp(ctx, second.ID, second.Epoch, domain.OpSucceeded, "", now))
	next, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: late.ID, Kind: domain.OpEvict, CreatedAt: now}, false)
	must(t, err)
	third, sess := claimOnly(t, st, next.ID, now)
	if third.Epoch != 2 || sess.Epoch != 2 {
		t.Fatalf("third claim epoch = %d (session %d), want 2", third.Epoch, sess.Epoch)
	}
}

func testClaimOpLeaseExpiry(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, create := newSession(t, st)
	first, _ := claimOnly(t, st, create.ID, t0)
	// Exactly at lease end it is still held; just after, it is reclaimable.
	_, _, err := st.ClaimOp(ctx, "w2", t0.Add(time.Minute), time.Minute)
	wantErr(t, err, store.ErrNoOp)
	later := t0.Add(time.Minute + time.Microsecond)
	second, sess, err := st.ClaimOp(ctx, "w2", later, time.Minute)
	must(t, err)
	if second.ID != first.ID || second.Attempts != 2 || second.Epoch != first.Epoch+1 || sess.Epoch != second.Epoch ||
		second.ClaimedBy != "w2" || second.State != domain.OpRunning {
		t.Fatalf("reclaimed op = %+v, first claim %+v", second, first)
	}
	wantTime(t, "lease_until", second.LeaseUntil, later.Add(time.Minute))
	// The first claimer's writes are stale now and change nothing.
	wantErr(t, st.RenewOp(ctx, first.ID, first.Epoch, later.Add(time.Hour)), store.ErrStaleEpoch)
	wantErr(t, st.SetOpStep(ctx, first.ID, first.Epoch, "stale"), store.ErrStaleEpoch)
	wantErr(t, st.FinishOp(ctx, first.ID, first.Epoch, domain.OpFailed, "stale", later), store.ErrStaleEpoch)
	_, err = st.AppendEvent(ctx, store.NewEvent{SessionID: sess.ID, Type: "log", Epoch: first.Epoch})
	wantErr(t, err, store.ErrStaleEpoch)
	got, err := st.GetOp(ctx, first.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(second) {
		t.Fatalf("op after stale writes = %+v, want %+v", got, second)
	}
	must(t, st.FinishOp(ctx, second.ID, second.Epoch, domain.OpSucceeded, "", later))
}

// ClaimConcurrently enqueues ops ops (one session each), then lets workers
// goroutines per store claim and finish them all, and checks that each op
// was claimed exactly once with a distinct epoch per session.
func ClaimConcurrently(t *testing.T, stores []store.Store, workers, ops int) {
	t.Helper()
	want := make(map[string]bool)
	for range ops {
		_, op := newSession(t, stores[0])
		want[op.ID] = true
	}
	var mu sync.Mutex
	claims := make(map[string]int)
	var wg sync.WaitGroup
	errs := make(chan error, workers*len(stores))
	for i, st := range stores {
		for w := range workers {
			wg.Go(func() {
				for {
					op, sess, err := st.ClaimOp(t.Context(), fmt.Sprintf("s%d-w%d", i, w), t0, time.Hour)
					if errors.Is(err, store.ErrNoOp) {
						return
					}
					if err == nil && sess.Epoch != op.Epoch {
						err = fmt.Errorf("op epoch %d, session epoch %d", op.Epoch, sess.Epoch)
					}
					if err == nil {
						err = st.FinishOp(t.Context(), op.ID, op.Epoch, domain.OpSucceeded, "", t0)
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					claims[op.ID]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(claims) != len(want) {
		t.Fatalf("claimed %d distinct ops, want %d", len(claims), len(want))
	}
	for id, n := range claims {
		if n != 1 || !want[id] {
			t.Fatalf("op %s claimed %d times (known: %v)", id, n, want[id])
		}
	}
}
