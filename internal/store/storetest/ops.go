package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

var opTests = []test{
	{"EnqueueOp", testEnqueueOp},
	{"EnqueueOpSupersede", testEnqueueOpSupersede},
	{"EnqueueOpIdempotent", testEnqueueOpIdempotent},
	{"EnqueueOpErrors", testEnqueueOpErrors},
	{"FencedOpWrites", testFencedOpWrites},
	{"FencedOpWritesRejected", testFencedOpWritesRejected},
	{"DeferOp", testDeferOp},
}

// testDeferOp: a deferred op is claimed again once its lease passes, and
// the deferred claim does not count as an attempt.
func testDeferOp(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, create := newSession(t, st)
	op, _ := claimOnly(t, st, create.ID, t0)
	wantErr(t, st.DeferOp(ctx, op.ID, op.Epoch-1, t0.Add(time.Second)), store.ErrStaleEpoch)
	must(t, st.DeferOp(ctx, op.ID, op.Epoch, t0.Add(time.Second)))
	_, _, err := st.ClaimOp(ctx, "other", t0.Add(500*time.Millisecond), time.Minute)
	wantErr(t, err, store.ErrNoOp)
	again, _ := claimOnly(t, st, create.ID, t0.Add(2*time.Second))
	if again.Attempts != op.Attempts || again.Epoch <= op.Epoch || again.State != domain.OpRunning {
		t.Fatalf("claimed again: %+v; want attempts %d and a newer epoch than %d", again, op.Attempts, op.Epoch)
	}
	must(t, st.FinishOp(ctx, again.ID, again.Epoch, domain.OpSucceeded, "", t0.Add(3*time.Second)))
	wantErr(t, st.DeferOp(ctx, again.ID, again.Epoch, t0.Add(time.Hour)), store.ErrConflict)
}

func testEnqueueOp(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	_, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict}, false)
	wantErr(t, err, store.ErrOpInProgress)
	op, sess := claimOnly(t, st, create.ID, t0)
	_, err = st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict}, false)
	wantErr(t, err, store.ErrOpInProgress)
	must(t, st.FinishOp(ctx, op.ID, op.Epoch, domain.OpSucceeded, "", t0))

	at := t0.Add(time.Minute)
	evict, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict, State: domain.OpRunning,
		Epoch: 99, Attempts: 7, CreatedAt: at}, false)
	must(t, err)
	if evict.State != domain.OpPending || evict.Kind != domain.OpEvict || evict.Epoch != 0 || evict.Attempts != 0 {
		t.Fatalf("enqueued op = %+v, want a fresh pending evict", evict)
	}
	wantTime(t, "created_at", evict.CreatedAt, at)
	ops, err := st.ListOps(ctx, sess.ID)
	must(t, err)
	if len(ops) != 2 || ops[0].ID != create.ID || ops[0].State != domain.OpSucceeded || ops[1].ID != evict.ID {
		t.Fatalf("ListOps = %+v", ops)
	}
	_, err = st.GetOp(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
	ops, err = st.ListOps(ctx, newSID())
	must(t, err)
	if len(ops) != 0 {
		t.Fatalf("ListOps of an unknown session = %+v", ops)
	}
}

func testEnqueueOpSupersede(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	// Supersede a pending op.
	evict, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict, CreatedAt: t0}, true)
	must(t, err)
	got, err := st.GetOp(ctx, create.ID)
	must(t, err)
	if got.State != domain.OpSuperseded {
		t.Fatalf("create op state = %s, want superseded", got.State)
	}
	// Supersede a running op: its claimer is shut out.
	claimed, sess := claimOnly(t, st, evict.ID, t0)
	destroy, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpDestroy, CreatedAt: t0}, true)
	must(t, err)
	wantErr(t, st.FinishOp(ctx, claimed.ID, claimed.Epoch, domain.OpSucceeded, "", t0), store.ErrConflict)
	wantErr(t, st.RenewOp(ctx, claimed.ID, claimed.Epoch, t0.Add(time.Hour)), store.ErrConflict)
	got, err = st.GetOp(ctx, claimed.ID)
	must(t, err)
	if got.State != domain.OpSuperseded {
		t.Fatalf("superseded running op state = %s", got.State)
	}
	// Claiming the new op bumps the epoch, which fences the old claimer's
	// session writes too.
	next, sess2 := claimOnly(t, st, destroy.ID, t0)
	if next.Epoch != claimed.Epoch+1 || sess2.Epoch != next.Epoch {
		t.Fatalf("epochs: old %d, new op %d, session %d", claimed.Epoch, next.Epoch, sess2.Epoch)
	}
	_, err = st.ApplyTransition(ctx, store.Transition{SessionID: sess.ID, Epoch: claimed.Epoch, From: domain.SessionCreated,
		To: domain.SessionCompleted, Event: lifecycle.DeleteRequested})
	wantErr(t, err, store.ErrStaleEpoch)
	ops, err := st.ListOps(ctx, sess.ID)
	must(t, err)
	if len(ops) != 3 {
		t.Fatalf("ops = %d, want 3", len(ops))
	}
}

func testEnqueueOpIdempotent(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	op, sess := claimOnly(t, st, create.ID, t0)
	must(t, st.FinishOp(ctx, op.ID, op.Epoch, domain.OpSucceeded, "", t0))
	first, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict, IdempotencyKey: "k"}, false)
	must(t, err)
	// Same key: the existing op, even with supersede and a pending op.
	for _, supersede := range []bool{false, true} {
		again, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict, IdempotencyKey: "k"}, supersede)
		must(t, err)
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("repeat enqueue (supersede=%v) = %+v, want %+v", supersede, again, first)
		}
	}
	got, err := st.GetOp(ctx, first.ID)
	must(t, err)
	if got.State != domain.OpPending {
		t.Fatalf("op state after idempotent repeats = %s, want pending", got.State)
	}
	// The key is per session.
	other, otherCreate := newSession(t, st)
	_, err = st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: other.ID, Kind: domain.OpDestroy, IdempotencyKey: "k"}, true)
	must(t, err)
	got, err = st.GetOp(ctx, otherCreate.ID)
	must(t, err)
	if got.State != domain.OpSuperseded {
		t.Fatalf("other session's create op = %s, want superseded", got.State)
	}
}

func testEnqueueOpErrors(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, create := newSession(t, st)
	_, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: newSID(), Kind: domain.OpEvict}, false)
	wantErr(t, err, store.ErrNotFound)
	_, err = st.EnqueueOp(ctx, domain.Op{ID: create.ID, SessionID: sess.ID, Kind: domain.OpEvict}, true)
	wantErr(t, err, store.ErrConflict)
	for _, op := range []domain.Op{
		{ID: newID(), SessionID: sess.ID, Kind: "teleport"},
		{SessionID: sess.ID, Kind: domain.OpEvict},
	} {
		if _, err := st.EnqueueOp(ctx, op, true); err == nil {
			t.Errorf("EnqueueOp(%+v) succeeded", op)
		}
	}
	// Nothing changed: the create op is still the only one, still pending.
	ops, err := st.ListOps(ctx, sess.ID)
	must(t, err)
	if len(ops) != 1 || ops[0].State != domain.OpPending {
		t.Fatalf("ops after failed enqueues = %+v", ops)
	}
}

func testFencedOpWrites(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, create := newSession(t, st)
	op, _ := claimOnly(t, st, create.ID, t0)
	until := t0.Add(5 * time.Minute)
	must(t, st.RenewOp(ctx, op.ID, op.Epoch, until))
	must(t, st.SetOpStep(ctx, op.ID, op.Epoch, "booting"))
	got, err := st.GetOp(ctx, op.ID)
	must(t, err)
	if got.Step != "booting" || got.State != domain.OpRunning {
		t.Fatalf("op = %+v", got)
	}
	wantTime(t, "lease_until", got.LeaseUntil, until)
	// The renewed lease keeps it from being reclaimed.
	_, _, err = st.ClaimOp(ctx, "other", t0.Add(2*time.Minute), time.Minute)
	wantErr(t, err, store.ErrNoOp)
	done := t0.Add(3 * time.Minute)
	must(t, st.FinishOp(ctx, op.ID, op.Epoch, domain.OpFailed, "boom", done))
	got, err = st.GetOp(ctx, op.ID)
	must(t, err)
	if got.State != domain.OpFailed || got.Error != "boom" || got.Step != "booting" || got.ClaimedBy != "worker" {
		t.Fatalf("finished op = %+v", got)
	}
	wantTime(t, "updated_at", got.UpdatedAt, done)
	// A finished op takes no more writes.
	wantErr(t, st.FinishOp(ctx, op.ID, op.Epoch, domain.OpSucceeded, "", done), store.ErrConflict)
	wantErr(t, st.SetOpStep(ctx, op.ID, op.Epoch, "x"), store.ErrConflict)
}

func testFencedOpWritesRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, create := newSession(t, st)
	// A pending op was never claimed: epoch 0 matches, but it is not running.
	wantErr(t, st.SetOpStep(ctx, create.ID, 0, "x"), store.ErrConflict)
	op, _ := claimOnly(t, st, create.ID, t0)
	before, err := st.GetOp(ctx, op.ID)
	must(t, err)
	writes := []struct {
		name string
		do   func(epoch int64, id string) error
	}{
		{"renew", func(e int64, id string) error { return st.RenewOp(ctx, id, e, t0.Add(time.Hour)) }},
		{"step", func(e int64, id string) error { return st.SetOpStep(ctx, id, e, "x") }},
		{"finish", func(e int64, id string) error { return st.FinishOp(ctx, id, e, domain.OpSucceeded, "", t0) }},
	}
	for _, w := range writes {
		wantErrNamed(t, w.name+" stale", w.do(op.Epoch-1, op.ID), store.ErrStaleEpoch)
		wantErrNamed(t, w.name+" future", w.do(op.Epoch+1, op.ID), store.ErrStaleEpoch)
		wantErrNamed(t, w.name+" unknown", w.do(op.Epoch, newID()), store.ErrNotFound)
	}
	if err := st.FinishOp(ctx, op.ID, op.Epoch, domain.OpRunning, "", t0); err == nil {
		t.Fatal("FinishOp(running) succeeded")
	}
	after, err := st.GetOp(ctx, op.ID)
	must(t, err)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rejected writes changed the op: %+v, was %+v", after, before)
	}
}

func wantErrNamed(t *testing.T, name string, err, target error) {
	t.Helper()
	if !errorsIs(err, target) {
		t.Errorf("%s: error = %v, want %v", name, err, target)
	}
}
