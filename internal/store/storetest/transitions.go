package storetest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

var transitionTests = []test{
	{"ApplyTransition", testApplyTransition},
	{"ApplyTransitionRejected", testApplyTransitionRejected},
	{"ApplyTransitionDesired", testApplyTransitionDesired},
}

// testApplyTransitionDesired: a transition may record the desired state
// with it, except over a wish to delete.
func testApplyTransitionDesired(t *testing.T, st store.Store) {
	ctx := t.Context()
	for _, tt := range []struct{ before, set, want domain.DesiredState }{
		{domain.DesireIdle, domain.DesireActive, domain.DesireActive},
		{domain.DesireActive, domain.DesireIdle, domain.DesireIdle},
		{domain.DesireDeleted, domain.DesireActive, domain.DesireDeleted},
	} {
		sess, op := newSession(t, st)
		_, sess = claimOnly(t, st, op.ID, t0)
		must(t, st.SetDesiredState(ctx, sess.ID, tt.before))
		got, err := st.ApplyTransition(ctx, store.Transition{SessionID: sess.ID, Epoch: sess.Epoch, From: domain.SessionCreated,
			To: domain.SessionStarting, Event: lifecycle.Place, HostID: ptr[domain.HostID]("h"), Desired: &tt.set, At: t0})
		must(t, err)
		read, err := st.GetSession(ctx, sess.ID)
		must(t, err)
		if got.DesiredState != tt.want || read.DesiredState != tt.want {
			t.Errorf("desired %s, then a transition setting %s: returned %s, read %s; want %s", tt.before, tt.set, got.DesiredState, read.DesiredState, tt.want)
		}
	}
	sess, op := newSession(t, st)
	_, sess = claimOnly(t, st, op.ID, t0)
	bogus := domain.DesiredState("sideways")
	if _, err := st.ApplyTransition(ctx, store.Transition{SessionID: sess.ID, Epoch: sess.Epoch, From: domain.SessionCreated,
		To: domain.SessionStarting, Event: lifecycle.Place, Desired: &bogus, At: t0}); err == nil {
		t.Error("a transition with an unknown desired state was applied")
	}
}

func testApplyTransition(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, op := newSession(t, st)
	_, sess = claimOnly(t, st, op.ID, t0)
	at := t0.Add(3e9)
	got, err := st.ApplyTransition(ctx, store.Transition{
		SessionID: sess.ID, Epoch: sess.Epoch, From: domain.SessionCreated, To: domain.SessionStarting,
		Event: lifecycle.Place, HostID: ptr[domain.HostID]("host-1"), At: at,
	})
	must(t, err)
	if got.State != domain.SessionStarting || got.HostID != "host-1" || got.Epoch != sess.Epoch || got.EventSeq != 2 || got.Reason != "" {
		t.Fatalf("after place: %+v", got)
	}
	wantTime(t, "updated_at", got.UpdatedAt, at)
	read, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	if fmt.Sprint(read) != fmt.Sprint(got) {
		t.Fatalf("GetSession = %+v, ApplyTransition returned %+v", read, got)
	}
	got, err = st.ApplyTransition(ctx, store.Transition{
		SessionID: sess.ID, Epoch: sess.Epoch, From: domain.SessionStarting, To: domain.SessionDead,
		Event: lifecycle.StartFailed, HostID: ptr[domain.HostID](""), Reason: ptr("boot failed"), At: at,
	})
	must(t, err)
	if got.State != domain.SessionDead || got.HostID != "" || got.Reason != "boot failed" || got.EventSeq != 3 {
		t.Fatalf("after start_failed: %+v", got)
	}
	events, err := st.ListEvents(ctx, sess.ID, 1, 0)
	must(t, err)
	want := []string{
		`{"event":"place","from":"created","host_id":"host-1","to":"starting"}`,
		`{"event":"start_failed","from":"starting","host_id":"","reason":"boot failed","to":"dead"}`,
	}
	if len(events) != len(want) {
		t.Fatalf("state events = %+v", events)
	}
	for i, e := range events {
		if e.Type != "state" || e.Seq != int64(i+2) {
			t.Fatalf("event %d = %+v", i, e)
		}
		wantTime(t, "event created_at", e.CreatedAt, at)
		var m map[string]any
		must(t, json.Unmarshal(e.Data, &m))
		canon, _ := json.Marshal(m)
		if string(canon) != want[i] {
			t.Fatalf("event %d data = %s, want %s", i, canon, want[i])
		}
	}
}

func testApplyTransitionRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, op := newSession(t, st)
	_, sess = claimOnly(t, st, op.ID, t0)
	place := store.Transition{SessionID: sess.ID, Epoch: sess.Epoch, From: domain.SessionCreated, To: domain.SessionStarting,
		Event: lifecycle.Place, HostID: ptr[domain.HostID]("h"), Reason: ptr("r"), At: t0}
	cases := []struct {
		name   string
		change func(*store.Transition)
		want   error
	}{
		{"stale epoch", func(tr *store.Transition) { tr.Epoch-- }, store.ErrStaleEpoch},
		{"future epoch", func(tr *store.Transition) { tr.Epoch++ }, store.ErrStaleEpoch},
		{"wrong from", func(tr *store.Transition) {
			tr.From, tr.Event, tr.To = domain.SessionIdle, lifecycle.ResumeRequested, domain.SessionResuming
		}, store.ErrConflict},
		{"unknown session", func(tr *store.Transition) { tr.SessionID = newSID() }, store.ErrNotFound},
		{"illegal event", func(tr *store.Transition) { tr.Event = lifecycle.Resumed }, lifecycle.ErrIllegal},
		{"wrong target", func(tr *store.Transition) { tr.To = domain.SessionActive }, lifecycle.ErrIllegal},
	}
	for _, c := range cases {
		tr := place
		c.change(&tr)
		_, err := st.ApplyTransition(ctx, tr)
		if !errorsIs(err, c.want) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
	}
	// None of them changed anything.
	got, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(sess) {
		t.Fatalf("session changed by rejected transitions: %+v, was %+v", got, sess)
	}
	events, err := st.ListEvents(ctx, sess.ID, 0, 0)
	must(t, err)
	if len(events) != 1 {
		t.Fatalf("events after rejected transitions = %d, want 1", len(events))
	}
}
