package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var keyTests = []test{
	{"EnqueueOpKeyAfterFailure", testEnqueueOpKeyAfterFailure},
	{"EnqueueOpKeyConcurrentRetry", testEnqueueOpKeyConcurrentRetry},
	{"CreateSessionKeyAfterFailure", testCreateSessionKeyAfterFailure},
	{"CreateSessionKeyConcurrentRetry", testCreateSessionKeyConcurrentRetry},
}

// failOp claims the only claimable op (wantOp) and finishes it failed.
func failOp(t *testing.T, st store.Store, wantOp string) domain.Session {
	t.Helper()
	op, sess := claimOnly(t, st, wantOp, t0)
	must(t, st.FinishOp(t.Context(), op.ID, op.Epoch, domain.OpFailed, "boom", t0))
	return sess
}

func enqueue(t *testing.T, st store.Store, sessionID domain.SessionID, kind domain.OpKind, key string, supersede bool) domain.Op {
	t.Helper()
	op, err := st.EnqueueOp(t.Context(), domain.Op{ID: newID(), SessionID: sessionID, Kind: kind, IdempotencyKey: key, CreatedAt: t0}, supersede)
	must(t, err)
	return op
}

// testEnqueueOpKeyAfterFailure: a failed or superseded op gives its key back,
// a pending, running or succeeded one keeps it.
func testEnqueueOpKeyAfterFailure(t *testing.T, st store.Store) {
	sess, create := newSession(t, st)
	failOp(t, st, create.ID)
	snap := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", false)
	failOp(t, st, snap.ID)
	retry := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", false)
	if retry.ID == snap.ID || retry.State != domain.OpPending || retry.Kind != domain.OpSnapshot {
		t.Fatalf("retry after failure = %+v, want a new pending op (failed one %s)", retry, snap.ID)
	}
	// A pending op keeps the key.
	if again := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", true); again.ID != retry.ID {
		t.Fatalf("repeat while pending = %s, want %s", again.ID, retry.ID)
	}
	// Superseded: the key is free again, and the new op supersedes in turn.
	destroy := enqueue(t, st, sess.ID, domain.OpDestroy, "d", true)
	third := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", true)
	if third.ID == retry.ID || third.ID == snap.ID {
		t.Fatalf("retry after supersede returned old op %s", third.ID)
	}
	// Running, then succeeded: the key stays taken.
	op, _ := claimOnly(t, st, third.ID, t0)
	if again := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", true); again.ID != third.ID || again.State != domain.OpRunning {
		t.Fatalf("repeat while running = %+v, want running %s", again, third.ID)
	}
	must(t, st.FinishOp(t.Context(), op.ID, op.Epoch, domain.OpSucceeded, "", t0.Add(time.Second)))
	if again := enqueue(t, st, sess.ID, domain.OpSnapshot, "k", false); again.ID != third.ID || again.State != domain.OpSucceeded {
		t.Fatalf("repeat after success = %+v, want succeeded %s", again, third.ID)
	}
	ops, err := st.ListOps(t.Context(), sess.ID)
	must(t, err)
	want := map[string]domain.OpState{create.ID: domain.OpFailed, snap.ID: domain.OpFailed, retry.ID: domain.OpSuperseded,
		destroy.ID: domain.OpSuperseded, third.ID: domain.OpSucceeded}
	if len(ops) != len(want) {
		t.Fatalf("ops = %d, want %d", len(ops), len(want))
	}
	for _, o := range ops {
		if want[o.ID] != o.State {
			t.Fatalf("op %s (%s) is %s, want %s", o.ID, o.Kind, o.State, want[o.ID])
		}
	}
}

// testEnqueueOpKeyConcurrentRetry: callers racing to retry a failed op's key,
// with and without supersede, insert one new op between them and supersede
// nothing of each other's.
func testEnqueueOpKeyConcurrentRetry(t *testing.T, st store.Store) {
	sess, create := newSession(t, st)
	failOp(t, st, create.ID)
	evict := enqueue(t, st, sess.ID, domain.OpEvict, "k", false)
	failOp(t, st, evict.ID)
	const n = 8
	got := make([]domain.Op, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = st.EnqueueOp(t.Context(), domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpEvict,
				IdempotencyKey: "k"}, i%2 == 1)
		})
	}
	wg.Wait()
	for i := range n {
		must(t, errs[i])
		if got[i].ID != got[0].ID || got[i].ID == evict.ID {
			t.Fatalf("call %d got op %s, call 0 got %s (failed op %s)", i, got[i].ID, got[0].ID, evict.ID)
		}
	}
	ops, err := st.ListOps(t.Context(), sess.ID)
	must(t, err)
	if len(ops) != 3 || ops[2].ID != got[0].ID || ops[2].State != domain.OpPending {
		t.Fatalf("ops = %+v, want create, failed evict and one pending retry", ops)
	}
}

func createWithKey(t *testing.T, st store.Store, key string) (domain.Session, domain.Op, bool) {
	t.Helper()
	sess, op, created, err := st.CreateSession(t.Context(), store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: key, At: t0})
	must(t, err)
	return sess, op, created
}

// testCreateSessionKeyAfterFailure: a session whose create op failed or was
// superseded gives its idempotency key to the next create.
func testCreateSessionKeyAfterFailure(t *testing.T, st store.Store) {
	ctx := t.Context()
	first, firstOp, _ := createWithKey(t, st, "req")
	failOp(t, st, firstOp.ID)
	second, secondOp, created := createWithKey(t, st, "req")
	if !created || second.ID == first.ID || second.IdempotencyKey != "req" || secondOp.State != domain.OpPending {
		t.Fatalf("create after a failed create: %+v, op %+v, created %v", second, secondOp, created)
	}
	// The old session keeps its key as a record.
	old, err := st.GetSession(ctx, first.ID)
	must(t, err)
	if old.IdempotencyKey != "req" {
		t.Fatalf("old session's key = %q", old.IdempotencyKey)
	}
	if again, op, created := createWithKey(t, st, "req"); created || again.ID != second.ID || op.ID != secondOp.ID {
		t.Fatalf("repeat = %s (op %s, created %v), want %s", again.ID, op.ID, created, second.ID)
	}
	// Superseded by a destroy: free again.
	destroy := enqueue(t, st, second.ID, domain.OpDestroy, "", true)
	op, _ := claimOnly(t, st, destroy.ID, t0)
	must(t, st.FinishOp(ctx, op.ID, op.Epoch, domain.OpSucceeded, "", t0))
	third, _, created := createWithKey(t, st, "req")
	if !created || third.ID == second.ID || third.ID == first.ID {
		t.Fatalf("create after a superseded create: %s, created %v", third.ID, created)
	}
	// A session whose failed create was retried by a newer create op holds
	// the key again.
	failOp(t, st, mustCreateOp(t, st, third.ID))
	retry := enqueue(t, st, third.ID, domain.OpCreate, "", false)
	if again, op, created := createWithKey(t, st, "req"); created || again.ID != third.ID || op.ID != retry.ID {
		t.Fatalf("repeat after a create retry = %s (op %s, created %v), want %s op %s", again.ID, op.ID, created, third.ID, retry.ID)
	}
	all, err := st.ListSessions(ctx, domain.SessionFilter{})
	must(t, err)
	if len(all) != 3 {
		t.Fatalf("sessions = %d, want 3", len(all))
	}
}

func mustCreateOp(t *testing.T, st store.Store, sessionID domain.SessionID) string {
	t.Helper()
	ops, err := st.ListOps(t.Context(), sessionID)
	must(t, err)
	if len(ops) != 1 || ops[0].Kind != domain.OpCreate {
		t.Fatalf("ops of %s = %+v, want its create op", sessionID, ops)
	}
	return ops[0].ID
}

func testCreateSessionKeyConcurrentRetry(t *testing.T, st store.Store) {
	first, firstOp, _ := createWithKey(t, st, "same")
	failOp(t, st, firstOp.ID)
	const n = 8
	ids := make([]domain.SessionID, n)
	created := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var s domain.Session
			s, _, created[i], errs[i] = st.CreateSession(t.Context(), store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: "same"})
			ids[i] = s.ID
		})
	}
	wg.Wait()
	wins := 0
	for i := range n {
		must(t, errs[i])
		if ids[i] != ids[0] || ids[i] == first.ID {
			t.Fatalf("call %d got session %s, call 0 got %s (failed %s)", i, ids[i], ids[0], first.ID)
		}
		if created[i] {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d calls created a session, want 1", wins)
	}
}
