package storetest

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

// BenchCreateDelete measures one session's whole short life per iteration:
// create (session, create op, event), ask for deletion and supersede the
// create op with a destroy op, claim it, apply Created→Completed (with its
// event) and finish the op.
func BenchCreateDelete(b *testing.B, st store.Store) {
	ctx := b.Context()
	for b.Loop() {
		sess, _, _, err := st.CreateSession(ctx, store.NewSession{ID: newSID(), OpID: newID(), At: t0})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.SetDesiredState(ctx, sess.ID, "deleted"); err != nil {
			b.Fatal(err)
		}
		if _, err := st.EnqueueOp(ctx, domain.Op{ID: newID(), SessionID: sess.ID, Kind: domain.OpDestroy, CreatedAt: t0}, true); err != nil {
			b.Fatal(err)
		}
		op, sess, err := st.ClaimOp(ctx, "bench", t0, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.ApplyTransition(ctx, store.Transition{SessionID: sess.ID, Epoch: op.Epoch, From: domain.SessionCreated,
			To: domain.SessionCompleted, Event: lifecycle.DeleteRequested, At: t0}); err != nil {
			b.Fatal(err)
		}
		if err := st.FinishOp(ctx, op.ID, op.Epoch, domain.OpSucceeded, "", t0); err != nil {
			b.Fatal(err)
		}
	}
}
