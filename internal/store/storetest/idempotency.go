package storetest

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

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
