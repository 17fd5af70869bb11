package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

var snapshotTests = []test{
	{"CommitSnapshot", testCommitSnapshot},
	{"CommitSnapshotRejected", testCommitSnapshotRejected},
	{"CommitSnapshotAtomic", testCommitSnapshotAtomic},
	{"DeleteSnapshots", testDeleteSnapshots},
	{"ForEachSnapshot", testForEachSnapshot},
}

// claimedSession creates a session and claims its create op.
func claimedSession(t *testing.T, st store.Store) (domain.Op, domain.Session) {
	t.Helper()
	_, create := newSession(t, st)
	return claimOnly(t, st, create.ID, t0)
}

func newSnapshot(sessionID domain.SessionID, outboxSeq int64, at time.Time) domain.Snapshot {
	return domain.Snapshot{
		ID: newSnapshotID(), SessionID: sessionID, HostID: "host-1",
		Manifests: json.RawMessage(`{"memory":{"chunks":["aa"]}}`), Facts: domain.HostFacts{CPUModel: "x"},
		Bytes: 1 << 30, Uploaded: 1 << 20, OutboxSeq: outboxSeq, HarnessSeq: 7, Reason: "snapshot", CreatedAt: at,
	}
}

// putItems appends n outbox items and returns them.
func putItems(t *testing.T, st store.Store, sessionID domain.SessionID, n int) []domain.OutboxItem {
	t.Helper()
	var out []domain.OutboxItem
	for range n {
		it, created, err := st.PutOutbox(t.Context(), domain.OutboxItem{SessionID: sessionID, ID: newID(), Kind: "prompt",
			Payload: json.RawMessage(`{"text":"hi"}`), CreatedAt: t0})
		must(t, err)
		if !created {
			t.Fatal("created = false for a new outbox item")
		}
		out = append(out, it)
	}
	return out
}

// wantOutboxStates checks the state of every item of a session, in seq order.
func wantOutboxStates(t *testing.T, st store.Store, sessionID domain.SessionID, want ...domain.OutboxState) []domain.OutboxItem {
	t.Helper()
	items, err := st.ListOutbox(t.Context(), sessionID, 0, 0)
	must(t, err)
	var got []domain.OutboxState
	for _, it := range items {
		got = append(got, it.State)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox states = %v, want %v", got, want)
	}
	return items
}

func wantHead(t *testing.T, st store.Store, sessionID domain.SessionID, want domain.SnapshotID) {
	t.Helper()
	sess, err := st.GetSession(t.Context(), sessionID)
	must(t, err)
	if sess.HeadSnapshotID != want {
		t.Fatalf("head = %q, want %q", sess.HeadSnapshotID, want)
	}
}

func testCommitSnapshot(t *testing.T, st store.Store) {
	ctx := t.Context()
	op, sess := claimedSession(t, st)
	wantHead(t, st, sess.ID, "")
	putItems(t, st, sess.ID, 3)
	must(t, st.MarkDelivered(ctx, sess.ID, 2, op.Epoch, t0))

	first := newSnapshot(sess.ID, 1, t0)
	first.Epoch = 99 // ignored: the row takes the commit's epoch
	must(t, st.CommitSnapshot(ctx, first, op.Epoch))
	wantHead(t, st, sess.ID, first.ID)
	got, err := st.GetSnapshot(ctx, first.ID)
	must(t, err)
	want := first
	want.Epoch, want.CreatedAt = op.Epoch, t0.UTC()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("GetSnapshot = %+v, want %+v", got, want)
	}
	wantTime(t, "created_at", got.CreatedAt, t0)
	// Delivered items the snapshot covers are durable; the rest are not.
	wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDelivered, domain.OutboxPending)

	// The parent is the previous head, given or not; pending items stay
	// pending even when the snapshot's outbox seq covers them.
	second := newSnapshot(sess.ID, 3, t0.Add(time.Second))
	second.ParentID = first.ID
	must(t, st.CommitSnapshot(ctx, second, op.Epoch))
	third := newSnapshot(sess.ID, 3, t0.Add(2*time.Second))
	must(t, st.CommitSnapshot(ctx, third, op.Epoch))
	wantHead(t, st, sess.ID, third.ID)
	wantOutboxStates(t, st, sess.ID, domain.OutboxDurable, domain.OutboxDurable, domain.OutboxPending)
	list, err := st.ListSnapshots(ctx, sess.ID)
	must(t, err)
	var ids, parents []domain.SnapshotID
	for _, s := range list {
		ids, parents = append(ids, s.ID), append(parents, s.ParentID)
	}
	if !slices.Equal(ids, []domain.SnapshotID{first.ID, second.ID, third.ID}) || !slices.Equal(parents, []domain.SnapshotID{"", first.ID, second.ID}) {
		t.Fatalf("ListSnapshots ids %v parents %v", ids, parents)
	}
	// The session row changed only its head.
	after, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	sess.HeadSnapshotID = third.ID
	if fmt.Sprint(after) != fmt.Sprint(sess) {
		t.Fatalf("session after commits = %+v, want %+v", after, sess)
	}
	_, err = st.GetSnapshot(ctx, newSnapshotID())
	wantErr(t, err, store.ErrNotFound)
	list, err = st.ListSnapshots(ctx, newSID())
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("snapshots of an unknown session = %+v", list)
	}
}

func testCommitSnapshotRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	op, sess := claimedSession(t, st)
	putItems(t, st, sess.ID, 2)
	must(t, st.MarkDelivered(ctx, sess.ID, 2, op.Epoch, t0))
	head := newSnapshot(sess.ID, 0, t0)
	must(t, st.CommitSnapshot(ctx, head, op.Epoch))
	cases := []struct {
		name   string
		change func(*domain.Snapshot, *int64)
		want   error // nil: any error
	}{
		{"stale epoch", func(_ *domain.Snapshot, e *int64) { *e-- }, store.ErrStaleEpoch},
		{"future epoch", func(_ *domain.Snapshot, e *int64) { *e++ }, store.ErrStaleEpoch},
		{"unknown session", func(s *domain.Snapshot, _ *int64) { s.SessionID = newSID() }, store.ErrNotFound},
		{"wrong parent", func(s *domain.Snapshot, _ *int64) { s.ParentID = newSnapshotID() }, store.ErrConflict},
		{"reused id", func(s *domain.Snapshot, _ *int64) { s.ID = head.ID }, store.ErrConflict},
		{"no id", func(s *domain.Snapshot, _ *int64) { s.ID = "" }, nil},
		{"bad manifests", func(s *domain.Snapshot, _ *int64) { s.Manifests = json.RawMessage(`{`) }, nil},
	}
	for _, c := range cases {
		snap, epoch := newSnapshot(sess.ID, 2, t0.Add(time.Second)), op.Epoch
		c.change(&snap, &epoch)
		err := st.CommitSnapshot(ctx, snap, epoch)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
		if snap.ID != head.ID && snap.ID != "" {
			_, err = st.GetSnapshot(ctx, snap.ID)
			wantErrNamed(t, c.name+": row inserted", err, store.ErrNotFound)
		}
	}
	// Nothing was written: same head, one row, items still delivered.
	wantHead(t, st, sess.ID, head.ID)
	list, err := st.ListSnapshots(ctx, sess.ID)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("snapshots after rejected commits = %d, want 1", len(list))
	}
	wantOutboxStates(t, st, sess.ID, domain.OutboxDelivered, domain.OutboxDelivered)
	// A terminal session takes no snapshot.
	transition(t, st, sess, lifecycle.DeleteRequested, nil)
	wantErr(t, st.CommitSnapshot(ctx, newSnapshot(sess.ID, 2, t0), op.Epoch), store.ErrConflict)
	wantHead(t, st, sess.ID, head.ID)
}

// testCommitSnapshotAtomic: a commit that fails at its insert (a snapshot id
// another session used) leaves head and outbox as they were.
func testCommitSnapshotAtomic(t *testing.T, st store.Store) {
	ctx := t.Context()
	opA, a := claimedSession(t, st)
	taken := newSnapshot(a.ID, 0, t0)
	must(t, st.CommitSnapshot(ctx, taken, opA.Epoch))
	opB, b := claimedSession(t, st)
	putItems(t, st, b.ID, 2)
	must(t, st.MarkDelivered(ctx, b.ID, 2, opB.Epoch, t0))
	for _, prev := range []domain.SnapshotID{"", newSnapshotID()} {
		if prev != "" {
			must(t, st.CommitSnapshot(ctx, domain.Snapshot{ID: prev, SessionID: b.ID, CreatedAt: t0}, opB.Epoch))
		}
		dup := newSnapshot(b.ID, 2, t0)
		dup.ID = taken.ID
		wantErr(t, st.CommitSnapshot(ctx, dup, opB.Epoch), store.ErrConflict)
		wantHead(t, st, b.ID, prev)
		wantOutboxStates(t, st, b.ID, domain.OutboxDelivered, domain.OutboxDelivered)
	}
	got, err := st.GetSnapshot(ctx, taken.ID)
	must(t, err)
	if got.SessionID != a.ID {
		t.Fatalf("snapshot %s now belongs to %s", taken.ID, got.SessionID)
	}
	wantHead(t, st, a.ID, taken.ID)
}

func testDeleteSnapshots(t *testing.T, st store.Store) {
	ctx := t.Context()
	op, sess := claimedSession(t, st)
	otherOp, other := claimedSession(t, st)
	for range 2 {
		must(t, st.CommitSnapshot(ctx, newSnapshot(sess.ID, 0, t0), op.Epoch))
	}
	kept := newSnapshot(other.ID, 0, t0)
	must(t, st.CommitSnapshot(ctx, kept, otherOp.Epoch))
	head, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	// Not terminal: refused, nothing removed.
	wantErr(t, st.DeleteSnapshots(ctx, sess.ID), store.ErrConflict)
	list, err := st.ListSnapshots(ctx, sess.ID)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("snapshots after a refused delete = %d, want 2", len(list))
	}
	wantHead(t, st, sess.ID, head.HeadSnapshotID)
	transition(t, st, head, lifecycle.DeleteRequested, nil)
	must(t, st.DeleteSnapshots(ctx, sess.ID))
	must(t, st.DeleteSnapshots(ctx, sess.ID)) // nothing left: still fine
	list, err = st.ListSnapshots(ctx, sess.ID)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("snapshots after delete = %+v", list)
	}
	wantHead(t, st, sess.ID, "")
	// Another session's snapshots are untouched.
	_, err = st.GetSnapshot(ctx, kept.ID)
	must(t, err)
	wantHead(t, st, other.ID, kept.ID)
	wantErr(t, st.DeleteSnapshots(ctx, newSID()), store.ErrNotFound)
}

func testForEachSnapshot(t *testing.T, st store.Store) {
	ctx := t.Context()
	// More rows than one page of sqlstore's ForEachSnapshot (500).
	want := map[domain.SnapshotID]domain.SessionID{}
	for i := range 3 {
		op, sess := claimedSession(t, st)
		for range 1 + i*300 {
			snap := newSnapshot(sess.ID, 0, t0)
			must(t, st.CommitSnapshot(ctx, snap, op.Epoch))
			want[snap.ID] = sess.ID
		}
	}
	seen := map[domain.SnapshotID]int{}
	must(t, st.ForEachSnapshot(ctx, func(s domain.Snapshot) error {
		if want[s.ID] != s.SessionID {
			return fmt.Errorf("snapshot %s of %s: unexpected", s.ID, s.SessionID)
		}
		seen[s.ID]++
		return nil
	}))
	if len(seen) != len(want) {
		t.Fatalf("visited %d snapshots, want %d", len(seen), len(want))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("snapshot %s visited %d times", id, n)
		}
	}
	stop := errors.New("stop")
	calls := 0
	err := st.ForEachSnapshot(ctx, func(domain.Snapshot) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("ForEachSnapshot with a failing fn: err %v after %d calls", err, calls)
	}
}
