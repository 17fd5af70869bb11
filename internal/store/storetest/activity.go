package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/store"
)

var activityTests = []test{
	{"TouchSession", testTouchSession},
}

func testTouchSession(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	// The idle clock starts at creation; there is no head yet.
	wantTime(t, "last_activity", sess.LastActivity, t0)
	if sess.HeadSnapshotID != "" {
		t.Fatalf("new session's head = %q", sess.HeadSnapshotID)
	}
	later := t0.Add(time.Minute)
	for _, at := range []time.Time{later, t0, later.Add(-time.Second), later} {
		must(t, st.TouchSession(ctx, sess.ID, at))
	}
	got, err := st.GetSession(ctx, sess.ID)
	must(t, err)
	wantTime(t, "last_activity", got.LastActivity, later)
	// Only the clock moved.
	got.LastActivity = sess.LastActivity
	if fmt.Sprint(got) != fmt.Sprint(sess) {
		t.Fatalf("TouchSession changed more than last_activity: %+v, was %+v", got, sess)
	}
	wantErr(t, st.TouchSession(ctx, newSID(), later), store.ErrNotFound)
}
