package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

var sessionTests = []test{
	{"CreateSession", testCreateSession},
	{"CreateSessionIdempotent", testCreateSessionIdempotent},
	{"CreateSessionConcurrentKey", testCreateSessionConcurrentKey},
	{"CreateSessionErrors", testCreateSessionErrors},
	{"ListSessions", testListSessions},
	{"SetDesiredState", testSetDesiredState},
	{"CountSessionsByState", testCountSessionsByState},
}

func testCreateSession(t *testing.T, st store.Store) {
	ctx := t.Context()
	n := store.NewSession{ID: newSID(), OpID: newID(), Spec: domain.SessionSpec{Image: "debian", VCPUs: 1, Env: map[string]string{"A": "b"}}, At: t0}
	sess, op, created, err := st.CreateSession(ctx, n)
	must(t, err)
	if !created || sess.ID != n.ID || sess.State != domain.SessionCreated || sess.DesiredState != domain.DesireActive ||
		sess.Epoch != 0 || sess.HostID != "" || sess.EventSeq != 1 || sess.IdempotencyKey != "" {
		t.Fatalf("session = %+v, created = %v", sess, created)
	}
	wantSame(t, "spec", sess.Spec, n.Spec)
	wantTime(t, "created_at", sess.CreatedAt, t0)
	wantTime(t, "updated_at", sess.UpdatedAt, t0)
	if op.ID != n.OpID || op.SessionID != n.ID || op.Kind != domain.OpCreate || op.State != domain.OpPending ||
		op.Epoch != 0 || op.Attempts != 0 {
		t.Fatalf("create op = %+v", op)
	}
	wantTime(t, "op created_at", op.CreatedAt, t0)
	got, err := st.GetSession(ctx, n.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(sess) {
		t.Fatalf("GetSession = %+v, want %+v", got, sess)
	}
	gotOp, err := st.GetOp(ctx, op.ID)
	must(t, err)
	if fmt.Sprint(gotOp) != fmt.Sprint(op) {
		t.Fatalf("GetOp = %+v, want %+v", gotOp, op)
	}
	events, err := st.ListEvents(ctx, n.ID, 0, 0)
	must(t, err)
	if len(events) != 1 || events[0].Seq != 1 || events[0].Type != "created" || events[0].SessionID != n.ID {
		t.Fatalf("events = %+v, want one created event", events)
	}
	wantTime(t, "event created_at", events[0].CreatedAt, t0)
	_, err = st.GetSession(ctx, newSID())
	wantErr(t, err, store.ErrNotFound)
}

func testCreateSessionIdempotent(t *testing.T, st store.Store) {
	ctx := t.Context()
	n := store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: "req-1", At: t0}
	first, firstOp, created, err := st.CreateSession(ctx, n)
	must(t, err)
	if !created || first.IdempotencyKey != "req-1" {
		t.Fatalf("first create: created = %v, session = %+v", created, first)
	}
	again := store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: "req-1", At: t0}
	sess, op, created, err := st.CreateSession(ctx, again)
	must(t, err)
	if created || sess.ID != first.ID || op.ID != firstOp.ID {
		t.Fatalf("repeat create: created = %v, session %s op %s, want %s %s", created, sess.ID, op.ID, first.ID, firstOp.ID)
	}
	_, err = st.GetSession(ctx, again.ID)
	wantErr(t, err, store.ErrNotFound)
	other, _, created, err := st.CreateSession(ctx, store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: "req-2"})
	must(t, err)
	if !created || other.ID == first.ID {
		t.Fatal("a different key did not create a new session")
	}
	// Empty keys never collide.
	newSession(t, st)
	newSession(t, st)
	all, err := st.ListSessions(ctx, domain.SessionFilter{})
	must(t, err)
	if len(all) != 4 {
		t.Fatalf("sessions = %d, want 4", len(all))
	}
}

func testCreateSessionConcurrentKey(t *testing.T, st store.Store) {
	const n = 8
	var wg sync.WaitGroup
	ids := make([]domain.SessionID, n)
	createdCount := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, _, created, err := st.CreateSession(t.Context(), store.NewSession{ID: newSID(), OpID: newID(), IdempotencyKey: "same"})
			ids[i], createdCount[i], errs[i] = s.ID, created, err
		})
	}
	wg.Wait()
	wins := 0
	for i := range n {
		must(t, errs[i])
		if ids[i] != ids[0] {
			t.Fatalf("call %d got session %s, call 0 got %s", i, ids[i], ids[0])
		}
		if createdCount[i] {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d calls created a session, want 1", wins)
	}
}

func testCreateSessionErrors(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	_, _, _, err := st.CreateSession(ctx, store.NewSession{ID: sess.ID, OpID: newID()})
	wantErr(t, err, store.ErrConflict)
	bad := []store.NewSession{
		{OpID: newID()},
		{ID: newSID()},
	}
	for _, n := range bad {
		if _, _, _, err := st.CreateSession(ctx, n); err == nil {
			t.Errorf("CreateSession(%+v) succeeded", n)
		}
	}
	all, err := st.ListSessions(ctx, domain.SessionFilter{})
	must(t, err)
	if len(all) != 1 {
		t.Fatalf("sessions after failed creates = %d, want 1", len(all))
	}
	ops, err := st.ListOps(ctx, sess.ID)
	must(t, err)
	if len(ops) != 1 {
		t.Fatalf("ops after a conflicting create = %d, want 1", len(ops))
	}
}

func testListSessions(t *testing.T, st store.Store) {
	ctx := t.Context()
	var all, onA, starting []domain.SessionID
	for i := range 10 {
		sess, op := newSession(t, st)
		all = append(all, sess.ID)
		_, sess = claimOnly(t, st, op.ID, t0)
		if i%3 == 0 {
			continue
		}
		host := domain.HostID("host-b")
		if i%2 == 0 {
			host = domain.HostID("host-a")
			onA = append(onA, sess.ID)
		}
		transition(t, st, sess, lifecycle.Place, &host)
		starting = append(starting, sess.ID)
	}
	slices.Sort(all)
	slices.Sort(onA)
	slices.Sort(starting)
	cases := []struct {
		name string
		f    domain.SessionFilter
		want []domain.SessionID
	}{
		{"all", domain.SessionFilter{}, all},
		{"host", domain.SessionFilter{HostID: "host-a"}, onA},
		{"states", domain.SessionFilter{States: []domain.SessionState{domain.SessionStarting, domain.SessionDead}}, starting},
		{"host and state", domain.SessionFilter{HostID: "host-a", States: []domain.SessionState{domain.SessionCreated}}, nil},
		{"limit", domain.SessionFilter{Limit: 3}, all[:3]},
		{"after", domain.SessionFilter{AfterID: all[6]}, all[7:]},
		{"after and limit", domain.SessionFilter{AfterID: all[2], Limit: 2}, all[3:5]},
		{"unknown host", domain.SessionFilter{HostID: "nope"}, nil},
	}
	for _, c := range cases {
		got, err := st.ListSessions(ctx, c.f)
		must(t, err)
		if ids := sessionIDs(got); !slices.Equal(ids, c.want) {
			t.Errorf("%s: ListSessions = %v, want %v", c.name, ids, c.want)
		}
	}
	// Keyset pagination visits every session once, in order.
	var paged []domain.SessionID
	f := domain.SessionFilter{Limit: 4}
	for {
		page, err := st.ListSessions(ctx, f)
		must(t, err)
		if len(page) == 0 {
			break
		}
		paged = append(paged, sessionIDs(page)...)
		f.AfterID = page[len(page)-1].ID
	}
	if !slices.Equal(paged, all) {
		t.Fatalf("paged = %v, want %v", paged, all)
	}
}

func sessionIDs(list []domain.Session) []domain.SessionID {
	var ids []domain.SessionID
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	return ids
}

func testSetDesiredState(t *testing.T, st store.Store) {
	ctx := t.Context()
	sess, _ := newSession(t, st)
	for _, d := range []domain.DesiredState{domain.DesireIdle, domain.DesireDeleted, domain.DesireActive} {
		must(t, st.SetDesiredState(ctx, sess.ID, d))
		got, err := st.GetSession(ctx, sess.ID)
		must(t, err)
		if got.DesiredState != d || got.Epoch != sess.Epoch || got.State != sess.State {
			t.Fatalf("after SetDesiredState(%s): %+v", d, got)
		}
	}
	if err := st.SetDesiredState(ctx, sess.ID, "sideways"); err == nil {
		t.Fatal("SetDesiredState(sideways) succeeded")
	}
	wantErr(t, st.SetDesiredState(ctx, newSID(), "idle"), store.ErrNotFound)
}

func testCountSessionsByState(t *testing.T, st store.Store) {
	ctx := t.Context()
	got, err := st.CountSessionsByState(ctx)
	must(t, err)
	wantSame(t, "counts of an empty store", got, map[domain.SessionState]int{})
	for i := range 3 {
		sess, op := newSession(t, st)
		if i == 2 {
			continue // stays created (its op is claimed last)
		}
		_, sess = claimOnly(t, st, op.ID, t0)
		host := domain.HostID("host-a")
		sess = transition(t, st, sess, lifecycle.Place, &host)
		if i == 1 {
			transition(t, st, sess, lifecycle.StartFailed, nil)
		}
	}
	got, err = st.CountSessionsByState(ctx)
	must(t, err)
	wantSame(t, "counts", got, map[domain.SessionState]int{
		domain.SessionCreated: 1, domain.SessionStarting: 1, domain.SessionDead: 1,
	})
}

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

var ownerTests = []test{
	{"SessionsBelongToTheirOwner", testSessionOwners},
	{"TasksBelongToTheirOwner", testTaskOwners},
}

// The owners both tests use: ada and bob are members of o1, a task or
// session is ada's private one, bob's shared one or the organisation's
// own; cara's is o2's.
var (
	adaPrivate = domain.Owner{OrgID: "o1", UserID: "ada"}
	bobShared  = domain.Owner{OrgID: "o1", UserID: "bob", Shared: true}
	orgsOwn    = domain.Owner{OrgID: "o1", Shared: true}
	caraOther  = domain.Owner{OrgID: "o2", UserID: "cara", Shared: true}
	viewers    = []struct {
		name string
		v    *domain.Viewer
		sees []domain.Owner
	}{
		{"ada", &domain.Viewer{OrgID: "o1", UserID: "ada"}, []domain.Owner{adaPrivate, bobShared, orgsOwn}},
		{"bob", &domain.Viewer{OrgID: "o1", UserID: "bob"}, []domain.Owner{bobShared, orgsOwn}},
		{"o1's admin", &domain.Viewer{OrgID: "o1", UserID: "root", All: true}, []domain.Owner{adaPrivate, bobShared, orgsOwn}},
		{"cara", &domain.Viewer{OrgID: "o2", UserID: "cara"}, []domain.Owner{caraOther}},
		{"cara as ada's id in o2", &domain.Viewer{OrgID: "o2", UserID: "ada"}, []domain.Owner{caraOther}},
		{"no organisation", &domain.Viewer{UserID: "ada", All: true}, nil},
		{"the coordinator", nil, []domain.Owner{adaPrivate, bobShared, orgsOwn, caraOther}},
	}
)

func testSessionOwners(t *testing.T, st store.Store) {
	ctx := t.Context()
	owners := []domain.Owner{adaPrivate, bobShared, orgsOwn, caraOther}
	for _, o := range owners {
		s, _, _, err := st.CreateSession(ctx, store.NewSession{ID: newSID(), OpID: newID(), At: t0,
			Spec: domain.SessionSpec{MemoryMiB: 256, Owner: o}})
		must(t, err)
		if s.Spec.Owner != o {
			t.Fatalf("created session's owner = %+v, want %+v", s.Spec.Owner, o)
		}
		got, err := st.GetSession(ctx, s.ID)
		must(t, err)
		if got.Spec.Owner != o || got.Spec.MemoryMiB != 256 {
			t.Fatalf("read session's owner = %+v (spec %+v), want %+v", got.Spec.Owner, got.Spec, o)
		}
	}
	for _, v := range viewers {
		ss, err := st.ListSessions(ctx, domain.SessionFilter{Viewer: v.v})
		must(t, err)
		var got []domain.Owner
		for _, s := range ss {
			got = append(got, s.Spec.Owner)
		}
		wantOwners(t, v.name+"'s sessions", got, v.sees)
	}
}

func testTaskOwners(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "owned")
	for _, o := range []domain.Owner{adaPrivate, bobShared, orgsOwn, caraOther} {
		task := newTask(p)
		task.Owner = o
		got, err := st.CreateTask(ctx, task)
		must(t, err)
		if got.Owner != o {
			t.Fatalf("created task's owner = %+v, want %+v", got.Owner, o)
		}
		if got, err = st.GetTask(ctx, task.ID); err != nil || got.Owner != o {
			t.Fatalf("read task's owner = %+v, %v; want %+v", got.Owner, err, o)
		}
	}
	for _, v := range viewers {
		ts, err := st.ListTasks(ctx, domain.TaskFilter{Viewer: v.v, ProfileID: p.ID})
		must(t, err)
		var got []domain.Owner
		for _, task := range ts {
			got = append(got, task.Owner)
		}
		wantOwners(t, v.name+"'s tasks", got, v.sees)
	}
	// The viewer narrows pages too: ada's second page starts after her first.
	ada := viewers[0].v
	first, err := st.ListTasks(ctx, domain.TaskFilter{Viewer: ada, Limit: 2})
	must(t, err)
	rest, err := st.ListTasks(ctx, domain.TaskFilter{Viewer: ada, AfterCreated: first[1].CreatedAt, AfterID: first[1].ID})
	must(t, err)
	if len(first) != 2 || len(rest) != 1 || !ada.Sees(rest[0].Owner) {
		t.Fatalf("ada's pages: %d then %d tasks", len(first), len(rest))
	}
}

func wantOwners(t *testing.T, what string, got, want []domain.Owner) {
	t.Helper()
	key := func(o domain.Owner) string {
		return string(o.OrgID) + "/" + string(o.UserID) + map[bool]string{true: "/shared"}[o.Shared]
	}
	var g, w []string
	for _, o := range got {
		g = append(g, key(o))
	}
	for _, o := range want {
		w = append(w, key(o))
	}
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Errorf("%s = %v, want %v", what, g, w)
	}
}
