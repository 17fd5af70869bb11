package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var harnessTests = []test{
	{"HarnessRoundTrip", testHarnessRoundTrip},
	{"HarnessFindNewest", testHarnessFindNewest},
	{"HarnessPutIdempotent", testHarnessPutIdempotent},
	{"HarnessPutRejected", testHarnessPutRejected},
	{"HarnessPutConcurrent", testHarnessPutConcurrent},
	{"HarnessDelete", testHarnessDelete},
}

func newHarness(name, version string, at time.Time) domain.Harness {
	return domain.Harness{
		ID: newID(), Name: name, Version: version,
		Descriptor: json.RawMessage(`{"entrypoint":["/opt/harness/bin/` + name + `"],"models":["m1"],` +
			`"hosts":["api.example"]}`),
		Manifest:  json.RawMessage(`{"chunks":["` + name + version + `"],"size":4096}`),
		Digest:    "sha256:" + name + "-" + version,
		CreatedAt: at,
	}
}

func wantHarness(t *testing.T, got, want domain.Harness) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Version != want.Version || got.Digest != want.Digest ||
		got.Builtin != want.Builtin {
		t.Fatalf("harness = %+v, want %+v", got, want)
	}
	wantJSON(t, "descriptor", got.Descriptor, want.Descriptor)
	wantJSON(t, "manifest", got.Manifest, want.Manifest)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
}

func putHarness(t *testing.T, st store.Store, h domain.Harness) domain.Harness {
	t.Helper()
	got, err := st.PutHarness(t.Context(), h)
	must(t, err)
	wantHarness(t, got, h)
	return got
}

func testHarnessRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	claude := newHarness("claude-code", "1.0.0", t0)
	claude.Builtin = true
	putHarness(t, st, claude)
	shell := newHarness("shell", "1", t0.Add(time.Second))
	shell.Descriptor, shell.Manifest = nil, nil
	putHarness(t, st, shell)
	unstamped := newHarness("codex", "0.1.0", time.Time{})
	got, err := st.PutHarness(ctx, unstamped)
	must(t, err)
	if got.CreatedAt.IsZero() || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("created_at of a harness put without one = %v, want now in UTC", got.CreatedAt)
	}
	unstamped.CreatedAt = got.CreatedAt

	got, err = st.GetHarness(ctx, claude.ID)
	must(t, err)
	wantHarness(t, got, claude)
	got, err = st.GetHarness(ctx, shell.ID)
	must(t, err)
	wantHarness(t, got, shell)
	if got.Descriptor != nil || got.Manifest != nil {
		t.Fatalf("descriptor, manifest = %s, %s; want none", got.Descriptor, got.Manifest)
	}
	got, err = st.FindHarness(ctx, "claude-code", "1.0.0")
	must(t, err)
	wantHarness(t, got, claude)

	list, err := st.ListHarnesses(ctx)
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("listed %d harnesses, want 3", len(list))
	}
	for i, want := range []domain.Harness{claude, unstamped, shell} { // by name
		wantHarness(t, list[i], want)
	}

	for _, c := range []struct{ name, version string }{{"claude-code", "2.0.0"}, {"nope", ""}, {"nope", "1"}, {"", ""}} {
		_, err := st.FindHarness(ctx, c.name, c.version)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("FindHarness(%q, %q) error = %v, want not found", c.name, c.version, err)
		}
	}
	_, err = st.GetHarness(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
}

func testHarnessFindNewest(t *testing.T, st store.Store) {
	ctx := t.Context()
	// Newest by creation time: not by insert order, not by version text.
	putHarness(t, st, newHarness("codex", "2.0.0", t0))
	v10 := putHarness(t, st, newHarness("codex", "10.0.0", t0.Add(time.Hour)))
	v9 := putHarness(t, st, newHarness("codex", "9.0.0", t0.Add(30*time.Minute)))
	putHarness(t, st, newHarness("shell", "1", t0.Add(2*time.Hour)))
	got, err := st.FindHarness(ctx, "codex", "")
	must(t, err)
	wantHarness(t, got, v10)
	got, err = st.FindHarness(ctx, "codex", "9.0.0")
	must(t, err)
	wantHarness(t, got, v9)

	list, err := st.ListHarnesses(ctx)
	must(t, err)
	var order []string
	for _, h := range list {
		order = append(order, h.Name+"@"+h.Version)
	}
	if want := "[codex@2.0.0 codex@9.0.0 codex@10.0.0 shell@1]"; fmt.Sprint(order) != want {
		t.Fatalf("ListHarnesses order = %v, want %s", order, want)
	}
}

func testHarnessPutIdempotent(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := putHarness(t, st, newHarness("claude-code", "1.0.0", t0))
	// The same bundle again, under a new id and with other details: the
	// stored row answers and nothing changes.
	again := newHarness("claude-code", "1.0.0", t0.Add(time.Hour))
	again.Builtin, again.Descriptor = true, json.RawMessage(`{"other":true}`)
	for _, put := range []domain.Harness{h, again} {
		got, err := st.PutHarness(ctx, put)
		must(t, err)
		wantHarness(t, got, h)
	}
	list, err := st.ListHarnesses(ctx)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d harnesses after idempotent puts, want 1", len(list))
	}
	wantHarness(t, list[0], h)
}

func testHarnessPutRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	h := putHarness(t, st, newHarness("claude-code", "1.0.0", t0))
	otherDigest := newHarness("claude-code", "1.0.0", t0)
	otherDigest.Digest = "sha256:rebuilt"
	reusedID := newHarness("codex", "1.0.0", t0)
	reusedID.ID = h.ID
	cases := []struct {
		name string
		h    domain.Harness
		want error // nil: any error
	}{
		{"other digest", otherDigest, store.ErrConflict},
		{"reused id", reusedID, store.ErrConflict},
		{"no id", domain.Harness{Name: "x", Version: "1", Digest: "sha256:x"}, nil},
		{"no name", domain.Harness{ID: newID(), Version: "1", Digest: "sha256:x"}, nil},
		{"no version", domain.Harness{ID: newID(), Name: "x", Digest: "sha256:x"}, nil},
		{"no digest", domain.Harness{ID: newID(), Name: "x", Version: "1"}, nil},
		{"bad descriptor", domain.Harness{ID: newID(), Name: "x", Version: "1", Digest: "d",
			Descriptor: json.RawMessage(`{`)}, nil},
		{"bad manifest", domain.Harness{ID: newID(), Name: "x", Version: "1", Digest: "d",
			Manifest: json.RawMessage(`[1,`)}, nil},
	}
	for _, c := range cases {
		_, err := st.PutHarness(ctx, c.h)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: PutHarness error = %v, want %v", c.name, err, c.want)
		}
	}
	list, err := st.ListHarnesses(ctx)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d harnesses after refused puts, want 1: %+v", len(list), list)
	}
	wantHarness(t, list[0], h)
}

// testHarnessPutConcurrent puts one bundle from many goroutines under
// different ids: every put succeeds and all answer with the one stored row.
func testHarnessPutConcurrent(t *testing.T, st store.Store) {
	const workers = 8
	ids := make([]string, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			got, err := st.PutHarness(t.Context(), newHarness("codex", "1.0.0", t0))
			ids[w], errs[w] = got.ID, err
		})
	}
	wg.Wait()
	for w := range workers {
		must(t, errs[w])
		if ids[w] != ids[0] {
			t.Fatalf("concurrent puts answered with ids %v, want one", ids)
		}
	}
	list, err := st.ListHarnesses(t.Context())
	must(t, err)
	if len(list) != 1 || list[0].ID != ids[0] {
		t.Fatalf("harnesses after concurrent puts = %+v, want only %s", list, ids[0])
	}
}

// testHarnessDelete: a deleted harness is found by id (with DeletedAt) and
// listed, but not found by name; the newest live version is; putting the
// same bundle again makes it live.
func testHarnessDelete(t *testing.T, st store.Store) {
	ctx := t.Context()
	old, err := st.PutHarness(ctx, newHarness("agent", "1.0", t0))
	must(t, err)
	h, err := st.PutHarness(ctx, newHarness("agent", "2.0", t0.Add(time.Minute)))
	must(t, err)
	del, err := st.DeleteHarness(ctx, h.ID, t0.Add(time.Hour))
	must(t, err)
	wantTime(t, "deleted at", del.DeletedAt, t0.Add(time.Hour))
	_, err = st.DeleteHarness(ctx, h.ID, t0.Add(2*time.Hour))
	wantErr(t, err, store.ErrNotFound)
	_, err = st.FindHarness(ctx, "agent", "2.0")
	wantErr(t, err, store.ErrNotFound)
	newest, err := st.FindHarness(ctx, "agent", "")
	must(t, err)
	wantSame(t, "newest live", newest.ID, old.ID)
	got, err := st.GetHarness(ctx, h.ID)
	must(t, err)
	wantTime(t, "deleted at by id", got.DeletedAt, t0.Add(time.Hour))
	list, err := st.ListHarnesses(ctx)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d harnesses, want both", len(list))
	}
	again, err := st.PutHarness(ctx, newHarness("agent", "2.0", t0.Add(3*time.Hour)))
	must(t, err)
	if again.ID != h.ID || !again.DeletedAt.IsZero() {
		t.Fatalf("the same bundle put again: %+v, want %s live", again, h.ID)
	}
	if f, err := st.FindHarness(ctx, "agent", ""); err != nil || f.ID != h.ID {
		t.Fatalf("newest after the put: %+v %v", f, err)
	}
}
