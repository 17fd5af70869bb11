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
	user := domain.Token{ID: newID(), Name: "laptop", Kind: domain.TokenUser, Prefix: "eu_ab", Hash: "aa11", CreatedAt: t0}
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

	list, err := st.ListTokens(ctx)
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
	tok := domain.Token{ID: newID(), Kind: domain.TokenUser, Hash: "cc33"}
	must(t, st.CreateToken(ctx, tok))
	cases := []struct {
		name string
		tok  domain.Token
		want error // nil: any error
	}{
		{"same hash", domain.Token{ID: newID(), Kind: domain.TokenUser, Hash: "cc33"}, store.ErrConflict},
		{"same id", domain.Token{ID: tok.ID, Kind: domain.TokenUser, Hash: "dd44"}, store.ErrConflict},
		{"bad kind", domain.Token{ID: newID(), Kind: "robot", Hash: "ee55"}, nil},
		{"host without host id", domain.Token{ID: newID(), Kind: domain.TokenHost, Hash: "ff66"}, nil},
		{"no hash", domain.Token{ID: newID(), Kind: domain.TokenUser}, nil},
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
	list, err := st.ListTokens(ctx)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("ListTokens after failed creates = %d tokens, want 1", len(list))
	}
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
