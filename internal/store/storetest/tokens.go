package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var tokenTests = []test{
	{"Tokens", testTokens},
	{"TokenErrors", testTokenErrors},
}

func testTokens(t *testing.T, st store.Store) {
	ctx := t.Context()
	user := ownerKey("aa11")
	user.Name, user.Prefix, user.CreatedAt = "laptop", "eu_ab", t0
	must(t, st.CreateToken(ctx, user))
	host := domain.Token{ID: newID(), Name: "h", Kind: domain.TokenHost, HostID: "host-1", Hash: "bb22", CreatedAt: t0.Add(time.Second)}
	must(t, st.CreateToken(ctx, host))

	got, err := st.TokenByHash(ctx, "aa11")
	must(t, err)
	if got.ID != user.ID || got.Name != "laptop" || got.Kind != domain.TokenUser || got.Prefix != "eu_ab" || got.HostID != "" {
		t.Fatalf("token = %+v, want %+v", got, user)
	}
	wantTime(t, "created_at", got.CreatedAt, t0)
	wantTime(t, "last_used_at", got.LastUsedAt, time.Time{})

	used := t0.Add(time.Hour)
	must(t, st.TouchToken(ctx, user.ID, used))
	got, err = st.TokenByHash(ctx, "aa11")
	must(t, err)
	wantTime(t, "last_used_at", got.LastUsedAt, used)

	revoked := t0.Add(2 * time.Hour)
	must(t, st.RevokeToken(ctx, user.ID, revoked))
	_, err = st.TokenByHash(ctx, "aa11")
	wantErr(t, err, store.ErrNotFound)
	must(t, st.RevokeToken(ctx, user.ID, revoked.Add(time.Hour))) // idempotent

	list, err := st.ListTokens(ctx, store.TokenFilter{})
	must(t, err)
	if len(list) != 2 || list[0].ID != user.ID || list[1].ID != host.ID {
		t.Fatalf("ListTokens = %+v, want [user host]", list)
	}
	wantTime(t, "revoked_at", list[0].RevokedAt, revoked)
	if list[1].HostID != "host-1" || !list[1].RevokedAt.IsZero() {
		t.Fatalf("host token = %+v", list[1])
	}
}

func testTokenErrors(t *testing.T, st store.Store) {
	ctx := t.Context()
	tok := ownerKey("cc33")
	must(t, st.CreateToken(ctx, tok))
	cases := []struct {
		name string
		tok  domain.Token
		want error // nil: any error
	}{
		{"same hash", ownerKey("cc33"), store.ErrConflict},
		{"same id", withID(ownerKey("dd44"), tok.ID), store.ErrConflict},
		{"bad kind", domain.Token{ID: newID(), Kind: "robot", Hash: "ee55"}, nil},
		{"host without host id", domain.Token{ID: newID(), Kind: domain.TokenHost, Hash: "ff66"}, nil},
		{"no hash", ownerKey(""), nil},
		{"user key without a user", domain.Token{ID: newID(), Kind: domain.TokenUser, OrgID: domain.FirstOrg, Role: domain.RoleOwner, Hash: "gg77"}, nil},
		{"user key without a role", domain.Token{ID: newID(), Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Hash: "hh88"}, nil},
		{"sign-in without an organisation", domain.Token{ID: newID(), Kind: domain.TokenSession, UserID: domain.FirstOwner, Hash: "jj00"}, nil},
		{"service key without an organisation", domain.Token{ID: newID(), Kind: domain.TokenService, UserID: domain.FirstOwner, Role: domain.RoleMember, Hash: "ii99"}, nil},
	}
	for _, c := range cases {
		err := st.CreateToken(ctx, c.tok)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: CreateToken error = %v, want %v", c.name, err, c.want)
		}
	}
	_, err := st.TokenByHash(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, st.RevokeToken(ctx, newID(), t0), store.ErrNotFound)
	wantErr(t, st.TouchToken(ctx, newID(), t0), store.ErrNotFound)
	list, err := st.ListTokens(ctx, store.TokenFilter{})
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("ListTokens after failed creates = %d tokens, want 1", len(list))
	}
}

// ownerKey is a personal key of the first organisation's owner (whom
// migration 00019 makes) with the given hash.
func ownerKey(hash string) domain.Token {
	return domain.Token{ID: newID(), Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner, Hash: hash}
}

func withID(t domain.Token, id string) domain.Token {
	t.ID = id
	return t
}

// Idempotency keys are kept per caller token.

var idempotencyTests = []test{
	{"IdempotencyKeyRecordsAndReplays", testIdempotencyReplay},
	{"IdempotencyKeysArePerTokenAndExpire", testIdempotencyScopeAndExpiry},
}

func idemReq(token, key string, at time.Time) domain.IdempotentRequest {
	return domain.IdempotentRequest{TokenID: token, Key: key, Route: "POST /v1/tasks", BodyHash: "h1", At: at}
}

func testIdempotencyReplay(t *testing.T, st store.Store) {
	ctx := t.Context()
	old := t0.Add(-time.Hour)
	_, created, err := st.BeginIdempotent(ctx, idemReq("tok", "k1", t0), old)
	must(t, err)
	if !created {
		t.Fatal("a new key was not created")
	}
	prev, created, err := st.BeginIdempotent(ctx, idemReq("tok", "k1", t0), old)
	must(t, err)
	if created || prev.Status != 0 || prev.Route != "POST /v1/tasks" || prev.BodyHash != "h1" {
		t.Fatalf("the key while its request runs: created %v, %+v", created, prev)
	}
	must(t, st.FinishIdempotent(ctx, "tok", "k1", domain.IdempotentResponse{Status: 201, ContentType: "application/json", Body: []byte(`{"id":"t1"}`)}))
	prev, created, err = st.BeginIdempotent(ctx, idemReq("tok", "k1", t0), old)
	must(t, err)
	if created || prev.Status != 201 || prev.ContentType != "application/json" || string(prev.Body) != `{"id":"t1"}` {
		t.Fatalf("the finished key: created %v, %+v", created, prev)
	}
	// A request that never finished (its replica died) gives its key to a
	// retry 10 minutes on.
	_, _, err = st.BeginIdempotent(ctx, idemReq("tok", "k3", t0), old)
	must(t, err)
	if _, created, err = st.BeginIdempotent(ctx, idemReq("tok", "k3", t0.Add(time.Minute)), old); err != nil || created {
		t.Fatalf("a running key a minute on: created %v, %v; want it held", created, err)
	}
	if _, created, err = st.BeginIdempotent(ctx, idemReq("tok", "k3", t0.Add(11*time.Minute)), old); err != nil || !created {
		t.Fatalf("an abandoned key: created %v, %v; want it taken over", created, err)
	}
	// A request that ended without an answer forgets its key.
	_, _, err = st.BeginIdempotent(ctx, idemReq("tok", "k2", t0), old)
	must(t, err)
	must(t, st.FinishIdempotent(ctx, "tok", "k2", domain.IdempotentResponse{}))
	if _, created, err = st.BeginIdempotent(ctx, idemReq("tok", "k2", t0), old); err != nil || !created {
		t.Fatalf("a forgotten key: created %v, %v", created, err)
	}
}

func testIdempotencyScopeAndExpiry(t *testing.T, st store.Store) {
	ctx := t.Context()
	long := t0.Add(-24 * time.Hour)
	_, created, err := st.BeginIdempotent(ctx, idemReq("alice", "k", t0), long)
	must(t, err)
	_, other, err2 := st.BeginIdempotent(ctx, idemReq("bob", "k", t0), long)
	must(t, err2)
	if !created || !other {
		t.Fatalf("one key of two callers: created %v and %v, want both", created, other)
	}
	// A day later, recording any key forgets the old ones.
	later := t0.Add(25 * time.Hour)
	_, _, err = st.BeginIdempotent(ctx, idemReq("carol", "x", later), later.Add(-24*time.Hour))
	must(t, err)
	if _, created, err = st.BeginIdempotent(ctx, idemReq("alice", "k", later), later.Add(-24*time.Hour)); err != nil || !created {
		t.Fatalf("an expired key: created %v, %v; want it forgotten", created, err)
	}
}

var peopleTests = []test{
	{"FirstOrgAndOwner", testFirstOrgAndOwner},
	{"OrgsUsersMembers", testOrgsUsersMembers},
	{"RemoveMemberRevokesTheirKeys", testRemoveMemberRevokes},
	{"KeysAreScopedByOrganisation", testKeysScoped},
	{"AuditPagesNewestFirstPerOrganisation", testAuditPages},
}

// testFirstOrgAndOwner: the migration makes the first organisation and
// its owner, who is the fleet operator (a single-user install's admin).
func testFirstOrgAndOwner(t *testing.T, st store.Store) {
	ctx := t.Context()
	o, err := st.GetOrg(ctx, domain.FirstOrg)
	must(t, err)
	m, err := st.GetMember(ctx, domain.FirstOrg, domain.FirstOwner)
	must(t, err)
	if o.Name != "default" || m.Role != domain.RoleOwner || !m.User.FleetOperator {
		t.Fatalf("first org %+v, owner %+v", o, m)
	}
}

func testOrgsUsersMembers(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.CreateOrg(ctx, domain.Org{ID: "org-b", Name: "beta", CreatedAt: t0}))
	wantErr(t, st.CreateOrg(ctx, domain.Org{ID: "org-c", Name: "beta"}), store.ErrConflict)
	_, err := st.GetOrg(ctx, "org-nope")
	wantErr(t, err, store.ErrNotFound)

	ada := domain.User{ID: "u-ada", Email: "Ada@Example.com", Name: "Ada", CreatedAt: t0}
	must(t, st.CreateUser(ctx, ada))
	wantErr(t, st.CreateUser(ctx, domain.User{ID: "u-ada2", Email: "ada@example.COM"}), store.ErrConflict)
	must(t, st.CreateUser(ctx, domain.User{ID: "u-nomail"}))
	must(t, st.CreateUser(ctx, domain.User{ID: "u-nomail2"})) // "" emails do not collide
	got, err := st.UserByEmail(ctx, "ADA@example.com")
	must(t, err)
	if got.ID != "u-ada" || got.Email != "ada@example.com" || got.FleetOperator {
		t.Fatalf("user by email = %+v", got)
	}
	_, err = st.UserByEmail(ctx, "")
	wantErr(t, err, store.ErrNotFound)

	must(t, st.PutMember(ctx, "org-b", "u-ada", domain.RoleMember, t0))
	must(t, st.PutMember(ctx, "org-b", "u-nomail", domain.RoleAdmin, t0.Add(time.Second)))
	must(t, st.PutMember(ctx, "org-b", "u-ada", domain.RoleAdmin, t0.Add(time.Hour))) // a new role, same membership
	if err := st.PutMember(ctx, "org-b", "u-ada", "root", t0); err == nil {
		t.Fatal("PutMember took role root")
	}
	m, err := st.GetMember(ctx, "org-b", "u-ada")
	must(t, err)
	if m.Role != domain.RoleAdmin || m.User.Name != "Ada" {
		t.Fatalf("member = %+v", m)
	}
	wantTime(t, "member since", m.CreatedAt, t0)
	_, err = st.GetMember(ctx, domain.FirstOrg, "u-ada")
	wantErr(t, err, store.ErrNotFound) // a member of beta is not one of the first organisation
	ms, err := st.ListMembers(ctx, "org-b")
	must(t, err)
	if len(ms) != 2 || ms[0].User.ID != "u-ada" || ms[1].User.ID != "u-nomail" {
		t.Fatalf("members of beta = %+v", ms)
	}
	of, err := st.Memberships(ctx, "u-nomail")
	must(t, err)
	if len(of) != 1 || of[0].OrgID != "org-b" || of[0].User.ID != "u-nomail" {
		t.Fatalf("memberships of u-nomail = %+v", of)
	}
	if none, err := st.Memberships(ctx, "u-nobody"); err != nil || len(none) != 0 {
		t.Fatalf("memberships of an unknown user = %+v, %v", none, err)
	}
}

func testRemoveMemberRevokes(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.CreateUser(ctx, domain.User{ID: "u-bob", Email: "bob@example.com"}))
	must(t, st.PutMember(ctx, domain.FirstOrg, "u-bob", domain.RoleMember, t0))
	key := domain.Token{ID: newID(), Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: "u-bob", Role: domain.RoleMember, Hash: "bob1"}
	svc := domain.Token{ID: newID(), Kind: domain.TokenService, OrgID: domain.FirstOrg, UserID: "u-bob", Role: domain.RoleMember, Hash: "bob2"}
	signin := domain.Token{ID: newID(), Kind: domain.TokenSession, OrgID: domain.FirstOrg, UserID: "u-bob", Role: domain.RoleMember, Hash: "bob3",
		CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour), IdleTimeout: 2 * time.Hour}
	must(t, st.CreateToken(ctx, key))
	must(t, st.CreateToken(ctx, svc))
	must(t, st.CreateToken(ctx, signin))
	got, err := st.TokenByHash(ctx, "bob3")
	must(t, err)
	if got.Kind != domain.TokenSession || got.IdleTimeout != 2*time.Hour || !got.ExpiresAt.Equal(signin.ExpiresAt) {
		t.Fatalf("a sign-in reads back as %+v", got)
	}
	must(t, st.RemoveMember(ctx, domain.FirstOrg, "u-bob", t0))
	_, err = st.TokenByHash(ctx, "bob1")
	wantErr(t, err, store.ErrNotFound) // their personal key went with them
	_, err = st.TokenByHash(ctx, "bob3")
	wantErr(t, err, store.ErrNotFound) // and their browser sign-ins
	if _, err := st.TokenByHash(ctx, "bob2"); err != nil {
		t.Fatalf("a service key they made outlives them (admins revoke it): %v", err)
	}
	wantErr(t, st.RemoveMember(ctx, domain.FirstOrg, "u-bob", t0), store.ErrNotFound)
}

func testKeysScoped(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.CreateOrg(ctx, domain.Org{ID: "org-b", Name: "beta"}))
	must(t, st.CreateUser(ctx, domain.User{ID: "u-b"}))
	mine := ownerKey("k1")
	theirs := domain.Token{ID: newID(), Kind: domain.TokenUser, OrgID: "org-b", UserID: "u-b", Role: domain.RoleMember, Hash: "k2",
		ExpiresAt: t0.Add(time.Hour)}
	must(t, st.CreateToken(ctx, mine))
	must(t, st.CreateToken(ctx, theirs))
	must(t, st.CreateToken(ctx, hostToken("host-9")))
	for _, c := range []struct {
		f    store.TokenFilter
		want []string
	}{
		{store.TokenFilter{OrgID: domain.FirstOrg}, []string{mine.ID}},
		{store.TokenFilter{OrgID: "org-b", UserID: "u-b", Kind: domain.TokenUser}, []string{theirs.ID}},
		{store.TokenFilter{OrgID: "org-b", UserID: domain.FirstOwner}, nil},
		{store.TokenFilter{Kind: domain.TokenService}, nil},
	} {
		got, err := st.ListTokens(ctx, c.f)
		must(t, err)
		var ids []string
		for _, k := range got {
			ids = append(ids, k.ID)
		}
		if len(ids) != len(c.want) || (len(ids) > 0 && ids[0] != c.want[0]) {
			t.Errorf("ListTokens(%+v) = %v, want %v", c.f, ids, c.want)
		}
	}
	got, err := st.TokenByHash(ctx, "k2")
	must(t, err)
	if got.OrgID != "org-b" || got.Role != domain.RoleMember || got.UserID != "u-b" {
		t.Fatalf("key = %+v", got)
	}
	wantTime(t, "expires_at", got.ExpiresAt, t0.Add(time.Hour))
}

func testAuditPages(t *testing.T, st store.Store) {
	ctx := t.Context()
	for i := range 5 {
		must(t, st.AppendAudit(ctx, domain.AuditEvent{ID: newID(), OrgID: domain.FirstOrg, ActorKind: "user", ActorID: "u1",
			Action: "secret.create", TargetID: string(rune('a' + i)), Status: 201, At: t0.Add(time.Duration(i/2) * time.Second)}))
	}
	must(t, st.AppendAudit(ctx, domain.AuditEvent{ID: newID(), OrgID: "org-b", ActorKind: "user", Action: "key.create", At: t0}))
	if err := st.AppendAudit(ctx, domain.AuditEvent{ID: newID()}); err == nil {
		t.Fatal("an audit event without an action was kept")
	}
	var seen []string
	var before *domain.AuditEvent
	for range 4 {
		page, err := st.ListAudit(ctx, domain.FirstOrg, before, 2)
		must(t, err)
		for _, e := range page {
			seen = append(seen, e.TargetID)
		}
		if len(page) < 2 {
			break
		}
		before = &page[len(page)-1]
	}
	// Newest first; events in the same microsecond by id, newest id first.
	if want := "edcba"; len(seen) != 5 || seen[0]+seen[1]+seen[2]+seen[3]+seen[4] != want {
		t.Fatalf("audit pages = %v, want %s", seen, want)
	}
}
