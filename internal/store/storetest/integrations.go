package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var integrationTests = []test{
	{"IntegrationsPutGetDelete", testIntegrations},
	{"DeliveriesRecordedOnce", testDeliveries},
	{"ChatThreadsClaimedByOneRelay", testChatThreads},
	{"IdentitiesMapAccountsToPeople", testIdentities},
	{"IntegrationsBelongToTheirOrganisation", testIntegrationOrgs},
}

// testIntegrationOrgs: one integration of a kind in the deployment,
// held by one organisation: another's put is a conflict, its list is
// empty and its delete finds nothing.
func testIntegrationOrgs(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, err := st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: "org-a", Sealed: []byte("a")})
	must(t, err)
	_, err = st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: "org-b", Sealed: []byte("b")})
	wantErr(t, err, store.ErrConflict)
	if _, err := st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationGitHub, Sealed: []byte("x")}); err == nil {
		t.Fatal("PutIntegration took an integration of no organisation")
	}
	in, err := st.GetIntegration(ctx, domain.IntegrationSlack)
	if err != nil || in.Org != "org-a" || string(in.Sealed) != "a" {
		t.Fatalf("the slack integration = %+v, %v", in, err)
	}
	if ins, err := st.ListIntegrations(ctx, "org-b"); err != nil || len(ins) != 0 {
		t.Fatalf("org-b's integrations = %+v, %v", ins, err)
	}
	wantErr(t, st.DeleteIntegration(ctx, "org-b", domain.IntegrationSlack), store.ErrNotFound)
	ins, err := st.ListIntegrations(ctx, "org-a")
	if err != nil || len(ins) != 1 {
		t.Fatalf("org-a's integrations after org-b's delete = %+v, %v", ins, err)
	}
	must(t, st.DeleteIntegration(ctx, "org-a", domain.IntegrationSlack))
}

// testIdentities: an account maps to one person per organisation (a new
// mapping replaces the old), a person lists theirs, and a mapping needs a
// user that exists.
func testIdentities(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.CreateOrg(ctx, domain.Org{ID: "o2", Name: "two", CreatedAt: t0}))
	for _, u := range []domain.UserID{"ada", "bob"} {
		must(t, st.CreateUser(ctx, domain.User{ID: u, Email: string(u) + "@example.com", CreatedAt: t0}))
	}
	slack := domain.IntegrationSlack
	must(t, st.PutIdentity(ctx, domain.Identity{OrgID: domain.FirstOrg, Kind: slack, ExternalID: "T1:U1", UserID: "ada", How: domain.IdentityByEmail, CreatedAt: t0}))
	must(t, st.PutIdentity(ctx, domain.Identity{OrgID: domain.FirstOrg, Kind: domain.IntegrationGitHub, ExternalID: "42", UserID: "ada", How: domain.IdentityByLink, CreatedAt: t0}))
	must(t, st.PutIdentity(ctx, domain.Identity{OrgID: "o2", Kind: slack, ExternalID: "T1:U1", UserID: "bob", How: domain.IdentityByLink, CreatedAt: t0}))
	got, err := st.GetIdentity(ctx, domain.FirstOrg, slack, "T1:U1")
	must(t, err)
	if got.UserID != "ada" || got.How != domain.IdentityByEmail || !got.CreatedAt.Equal(t0) {
		t.Fatalf("identity = %+v", got)
	}
	if other, err := st.GetIdentity(ctx, "o2", slack, "T1:U1"); err != nil || other.UserID != "bob" {
		t.Fatalf("the same account in another organisation = %+v, %v; want bob's", other, err)
	}
	_, err = st.GetIdentity(ctx, domain.FirstOrg, slack, "T1:U2")
	wantErr(t, err, store.ErrNotFound)
	must(t, st.PutIdentity(ctx, domain.Identity{OrgID: domain.FirstOrg, Kind: slack, ExternalID: "T1:U1", UserID: "bob", How: domain.IdentityByLink, CreatedAt: t0}))
	if got, _ := st.GetIdentity(ctx, domain.FirstOrg, slack, "T1:U1"); got.UserID != "bob" || got.How != domain.IdentityByLink {
		t.Fatalf("remapped identity = %+v, want bob's by link", got)
	}
	ids, err := st.ListIdentities(ctx, domain.FirstOrg, "ada")
	must(t, err)
	if len(ids) != 1 || ids[0].Kind != domain.IntegrationGitHub {
		t.Fatalf("ada's identities = %+v, want her GitHub account only", ids)
	}
	wantErr(t, st.PutIdentity(ctx, domain.Identity{OrgID: domain.FirstOrg, Kind: slack, ExternalID: "T1:U3", UserID: "nobody", How: domain.IdentityByLink}), store.ErrNotFound)
	must(t, st.DeleteIdentity(ctx, domain.FirstOrg, domain.IntegrationGitHub, "42"))
	wantErr(t, st.DeleteIdentity(ctx, domain.FirstOrg, domain.IntegrationGitHub, "42"), store.ErrNotFound)

	// Link codes: taken once, never after they expire; an expired one
	// is forgotten when the next is made.
	code := domain.IdentityCode{Hash: "h1", OrgID: domain.FirstOrg, UserID: "ada", Kind: slack, ExpiresAt: t0.Add(10 * time.Minute), CreatedAt: t0}
	must(t, st.CreateIdentityCode(ctx, code))
	wantErr(t, st.CreateIdentityCode(ctx, code), store.ErrConflict)
	_, err = st.TakeIdentityCode(ctx, "h1", t0.Add(11*time.Minute))
	wantErr(t, err, store.ErrNotFound)
	took, err := st.TakeIdentityCode(ctx, "h1", t0.Add(time.Minute))
	must(t, err)
	if took.UserID != "ada" || took.OrgID != domain.FirstOrg || took.Kind != slack || !took.ExpiresAt.Equal(code.ExpiresAt) {
		t.Fatalf("taken code = %+v", took)
	}
	_, err = st.TakeIdentityCode(ctx, "h1", t0.Add(time.Minute))
	wantErr(t, err, store.ErrNotFound)
	must(t, st.CreateIdentityCode(ctx, domain.IdentityCode{Hash: "h2", OrgID: domain.FirstOrg, UserID: "bob", Kind: slack,
		ExpiresAt: t0.Add(time.Minute), CreatedAt: t0}))
	must(t, st.CreateIdentityCode(ctx, domain.IdentityCode{Hash: "h3", OrgID: domain.FirstOrg, UserID: "bob", Kind: slack,
		ExpiresAt: t0.Add(time.Hour), CreatedAt: t0.Add(2 * time.Minute)}))
	_, err = st.TakeIdentityCode(ctx, "h2", t0)
	wantErr(t, err, store.ErrNotFound) // forgotten when h3 was made, though taken "before" its expiry here
}

func testIntegrations(t *testing.T, st store.Store) {
	ctx := t.Context()
	in, err := st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: domain.FirstOrg, Config: []byte(`{"channels":{"C1":"agent"}}`),
		Sealed: []byte("sealed-1"), UpdatedAt: t0})
	must(t, err)
	wantTime(t, "created_at", in.CreatedAt, t0)
	_, err = st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: domain.FirstOrg, Config: []byte(`{"channels":{}}`), Sealed: []byte("sealed-2"),
		UpdatedAt: t0.Add(time.Minute)})
	must(t, err)
	got, err := st.GetIntegration(ctx, domain.IntegrationSlack)
	must(t, err)
	if string(got.Config) != `{"channels":{}}` || string(got.Sealed) != "sealed-2" || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("replaced integration: %+v", got)
	}
	_, err = st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationGitHub, Org: domain.FirstOrg, Sealed: []byte("gh")})
	must(t, err)
	all, err := st.ListIntegrations(ctx, domain.FirstOrg)
	must(t, err)
	if len(all) != 2 || all[0].Kind != domain.IntegrationGitHub || string(all[0].Config) != `{}` {
		t.Fatalf("list: %+v", all)
	}
	if _, err := st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationLinear, Org: domain.FirstOrg}); err == nil {
		t.Fatal("an integration without credentials was stored")
	}
	sealed, err := st.ListSealed(ctx, domain.SealedIntegration, "", 0)
	must(t, err)
	if len(sealed) != 2 {
		t.Fatalf("sealed integrations: %+v", sealed)
	}
	must(t, st.ReplaceSealed(ctx, domain.SealedIntegration, "slack", []byte("sealed-2"), []byte("sealed-3")))
	must(t, st.DeleteIntegration(ctx, domain.FirstOrg, domain.IntegrationSlack))
	wantErr(t, st.DeleteIntegration(ctx, domain.FirstOrg, domain.IntegrationSlack), store.ErrNotFound)
	_, err = st.GetIntegration(ctx, domain.IntegrationSlack)
	wantErr(t, err, store.ErrNotFound)
}

func testDeliveries(t *testing.T, st store.Store) {
	ctx := t.Context()
	var first atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := st.RecordDelivery(ctx, "slack", "Ev1", t0, t0.Add(24*time.Hour))
			if err != nil {
				t.Errorf("record: %v", err)
			}
			if ok {
				first.Add(1)
			}
		})
	}
	wg.Wait()
	if first.Load() != 1 {
		t.Fatalf("one delivery was new %d times", first.Load())
	}
	// Each delivery keeps its own expiry: GitHub's a week, Slack's a day.
	if ok, err := st.RecordDelivery(ctx, "github", "Ev1", t0, t0.Add(7*24*time.Hour)); err != nil || !ok {
		t.Fatalf("another source's id: %v %v", ok, err)
	}
	// A day on, Slack's is forgotten, GitHub's is not.
	day := t0.Add(25 * time.Hour)
	if ok, err := st.RecordDelivery(ctx, "slack", "Ev1", day, day.Add(24*time.Hour)); err != nil || !ok {
		t.Fatalf("a forgotten delivery: %v %v", ok, err)
	}
	if ok, err := st.RecordDelivery(ctx, "github", "Ev1", day, day.Add(7*24*time.Hour)); err != nil || ok {
		t.Fatalf("a delivery kept for a week, a day on: new %v %v", ok, err)
	}
	if ok, err := st.RecordDelivery(ctx, "github", "Ev1", t0.Add(8*24*time.Hour), t0.Add(15*24*time.Hour)); err != nil || !ok {
		t.Fatalf("a week's delivery, a week on: new %v %v", ok, err)
	}
	// A delivery forgotten (it started nothing) is new again.
	must(t, st.ForgetDelivery(ctx, "github", "Ev1"))
	if ok, err := st.RecordDelivery(ctx, "github", "Ev1", t0.Add(8*24*time.Hour), t0.Add(15*24*time.Hour)); err != nil || !ok {
		t.Fatalf("a forgotten delivery again: new %v %v", ok, err)
	}
}

func testChatThreads(t *testing.T, st store.Store) {
	ctx := t.Context()
	task := createTask(t, st, createProfile(t, st, "go"))
	th := domain.ChatThread{Kind: domain.IntegrationSlack, Channel: "C1", Thread: "1700000000.000100", TaskID: task.ID, RunID: "run-1", StartedBy: "U1", CreatedAt: t0}
	got, created, err := st.PutThread(ctx, th)
	must(t, err)
	if !created || got.TaskID != task.ID || got.StartedBy != "U1" {
		t.Fatalf("put: %+v %v", got, created)
	}
	other := th
	other.TaskID = "another"
	if got, created, err := st.PutThread(ctx, other); err != nil || created || got.TaskID != task.ID {
		t.Fatalf("the same thread again: %+v %v %v", got, created, err)
	}
	// Nothing to relay until the task has events.
	if claimed, err := st.ClaimThreads(ctx, "r1", t0, t0.Add(30*time.Second), 10); err != nil || len(claimed) != 0 {
		t.Fatalf("claimed %+v, %v with nothing to relay", claimed, err)
	}
	_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "prompt"}, {Type: "assistant_text"}})
	must(t, err)
	var n atomic.Int32
	var wg sync.WaitGroup
	for _, owner := range []string{"r1", "r2", "r3"} {
		wg.Go(func() {
			c, err := st.ClaimThreads(ctx, owner, t0, t0.Add(30*time.Second), 10)
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			n.Add(int32(len(c)))
		})
	}
	wg.Wait()
	if n.Load() != 1 {
		t.Fatalf("the thread was claimed %d times", n.Load())
	}
	cur, err := st.GetThread(ctx, domain.IntegrationSlack, "C1", th.Thread)
	must(t, err)
	holder := cur.LeaseOwner
	cur.TurnSeq, cur.Message, cur.RelayedSeq = 1, "1700000000.000200", 2
	wantErr(t, st.UpdateThread(ctx, cur, "someone-else"), store.ErrConflict)
	must(t, st.UpdateThread(ctx, cur, holder))
	// Relayed to the end: not claimable until the task has more events.
	if c, err := st.ClaimThreads(ctx, holder, t0, t0.Add(time.Minute), 10); err != nil || len(c) != 0 {
		t.Fatalf("claimed a relayed thread: %+v %v", c, err)
	}
	_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "idle"}})
	must(t, err)
	if c, err := st.ClaimThreads(ctx, "r9", t0.Add(10*time.Second), t0.Add(time.Minute), 10); err != nil || len(c) != 0 {
		t.Fatalf("took a thread whose lease runs: %+v %v", c, err)
	}
	c, err := st.ClaimThreads(ctx, "r9", t0.Add(31*time.Second), t0.Add(time.Minute), 10)
	must(t, err)
	if len(c) != 1 || c[0].LeaseOwner != "r9" || c[0].Message != "1700000000.000200" || c[0].RelayedSeq != 2 {
		t.Fatalf("taken over after the lease: %+v", c)
	}
}
