package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

// test is one conformance check against a fresh store.
type test struct {
	name string
	fn   func(t *testing.T, st store.Store)
}

// Run runs the suite. open must return a fresh, empty store for each call;
// Run closes it when the subtest ends (Close must therefore be idempotent if
// open also arranges to close it).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	groups := [][]test{hostTests, hostAccessTests, drainTests, tokenTests, sessionTests, activityTests, transitionTests, opTests, keyTests,
		claimTests, eventTests, snapshotTests, outboxTests, notifyTests, imageTests, harnessTests, secretTests, sealedTests,
		profileTests, taskTests, taskIngestTests, egressTests, idempotencyTests, automationTests, integrationTests, peopleTests, ownerTests, orgScopeTests}
	for _, group := range groups {
		for _, tc := range group {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st := open(t)
				t.Cleanup(func() {
					if err := st.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				})
				tc.fn(t, st)
			})
		}
	}
}

// t0 is the suite's clock: microsecond precision, not UTC on purpose.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.FixedZone("X", 3600))

// waitFor bounds every wait for a wake-up.
const waitFor = 10 * time.Second

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func newSID() domain.SessionID { return domain.SessionID(newID()) }
func newHID() domain.HostID    { return domain.HostID(newID()) }

func newProfileID() domain.ProfileID   { return domain.ProfileID(newID()) }
func newSecretID() domain.SecretID     { return domain.SecretID(newID()) }
func newImageID() domain.ImageID       { return domain.ImageID(newID()) }
func newSnapshotID() domain.SnapshotID { return domain.SnapshotID(newID()) }
func newImageJobID() domain.ImageJobID { return domain.ImageJobID(newID()) }

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	if !want.IsZero() && got.Location() != time.UTC {
		t.Fatalf("%s location = %v, want UTC", what, got.Location())
	}
}

// wantSame fails unless got and want are deeply equal (typed columns).
func wantSame[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

func wantJSON(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	if string(got) != string(want) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// newSession creates a session with a pending create op.
func newSession(t *testing.T, st store.Store) (domain.Session, domain.Op) {
	t.Helper()
	sess, op, created, err := st.CreateSession(t.Context(), store.NewSession{
		ID: newSID(), OpID: newID(), Spec: domain.SessionSpec{Image: "debian"}, At: t0,
	})
	must(t, err)
	if !created {
		t.Fatal("created = false for a new session")
	}
	return sess, op
}

// claimOnly claims the only claimable op and checks it is wantOp.
func claimOnly(t *testing.T, st store.Store, wantOp string, now time.Time) (domain.Op, domain.Session) {
	t.Helper()
	op, sess, err := st.ClaimOp(t.Context(), "worker", now, time.Minute)
	must(t, err)
	if op.ID != wantOp {
		t.Fatalf("claimed op %s, want %s", op.ID, wantOp)
	}
	return op, sess
}

// transition applies event to a session and returns the new row.
func transition(t *testing.T, st store.Store, sess domain.Session, e lifecycle.Event, hostID *domain.HostID) domain.Session {
	t.Helper()
	to, err := lifecycle.Transition(sess.State, e)
	must(t, err)
	out, err := st.ApplyTransition(t.Context(), store.Transition{
		SessionID: sess.ID, Epoch: sess.Epoch, From: sess.State, To: to, Event: e, HostID: hostID, At: t0,
	})
	must(t, err)
	return out
}

func ptr[T any](v T) *T { return &v }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

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
