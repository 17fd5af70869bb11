package chunk

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestPutFileOver writes a memory-like file, then versions of it with a few
// pages changed in a few chunks: the changes go up as small deltas over the
// parent's chunks, a store with an empty cache restores every version
// exactly, and a lost base or delta object is reported, never misread.
func TestPutFileOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const cs = 64 << 10
	bl := newMemBlob()
	cache := testCache(t)
	s := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl, Cache: cache})
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 32*cs)
	fillRand(rng, data[:24*cs]) // the rest stays zero
	write := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v0, st0, err := s.PutFile(ctx, write("v0"))
	if err != nil || st0.Uploaded != 24 || st0.Deltas != 0 {
		t.Fatalf("v0: %+v %v", st0, err)
	}
	touch := func(c int, v byte) { data[c*cs+3*pageLen+17] ^= v } // one page of chunk c
	touch(2, 1)
	touch(5, 2)
	touch(9, 3)
	v1, st1, err := s.PutFileOver(ctx, write("v1"), v0)
	if err != nil {
		t.Fatal(err)
	}
	checkFirstDeltas(t, v0, v1, st1)
	touch(5, 2)  // back to v0's bytes: stored whole (it is its own base)
	touch(9, 4)  // changes again: still a delta over v0's chunk
	touch(11, 5) // a new change
	v2, st2, err := s.PutFileOver(ctx, write("v2"), v1)
	if err != nil {
		t.Fatal(err)
	}
	checkSecondDeltas(t, v0, v1, v2, st2)
	want2 := append([]byte(nil), data...)

	// A store that never saw these files restores each version exactly.
	cold := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl})
	restoreColdVersions(t, cold, dir, map[string]Manifest{"v1": v1, "v2": v2}, want2)
	healDamagedCacheCopy(t, s, cache, v2, dir, want2)
	refuseLostDelta(t, s, cold, bl, v2, dir)
	refuseCorruptDelta(t, s, bl, v1, dir)
}

// checkFirstDeltas checks v1, v0 with chunks 2, 5 and 9 changed: those go
// up as deltas of about one page over v0's chunks, the rest are reused.
func checkFirstDeltas(t *testing.T, v0, v1 Manifest, st1 PutStats) {
	t.Helper()
	if st1.Deltas != 3 || st1.Uploaded != 3 || st1.StoredBytes > 3*(pageLen+16) {
		t.Errorf("v1 uploads: %+v, want 3 deltas of about one page", st1)
	}
	for i, r := range v1.Chunks {
		if want := i == 2 || i == 5 || i == 9; r.IsDelta() != want || (want && r.Base != v0.Chunks[i].Hash) {
			t.Errorf("v1 chunk %d: %v (delta wanted: %v)", i, r, want)
		}
	}
}

// checkSecondDeltas checks v2 over v1: an unchanged delta chunk is reused,
// a chunk back to its base is stored whole, a chunk changed again is still
// a delta over v0's chunk, and a newly changed chunk is a delta.
func checkSecondDeltas(t *testing.T, v0, v1, v2 Manifest, st2 PutStats) {
	t.Helper()
	switch {
	case v2.Chunks[2] != v1.Chunks[2]:
		t.Errorf("unchanged delta chunk not reused: %v vs %v", v2.Chunks[2], v1.Chunks[2])
	case v2.Chunks[5] != v0.Chunks[5]:
		t.Errorf("chunk back to its base: %v, want %v", v2.Chunks[5], v0.Chunks[5])
	case !v2.Chunks[9].IsDelta() || v2.Chunks[9].Base != v0.Chunks[9].Hash:
		t.Errorf("chunk 9 not a delta over v0's chunk: %v", v2.Chunks[9])
	case !v2.Chunks[11].IsDelta():
		t.Errorf("chunk 11 not a delta: %v", v2.Chunks[11])
	}
	if st2.Deltas != 2 {
		t.Errorf("v2 uploads: %+v, want 2 deltas", st2)
	}
}

// restoreColdVersions verifies and restores each version with cold, a store
// that never saw the files; v2 must come back as want2.
func restoreColdVersions(t *testing.T, cold *Store, dir string, versions map[string]Manifest, want2 []byte) {
	t.Helper()
	ctx := context.Background()
	for name, m := range versions {
		if err := cold.Verify(ctx, m); err != nil {
			t.Fatalf("verify %s: %v", name, err)
		}
		out := filepath.Join(dir, name+".restored")
		if err := cold.Restore(ctx, m, out); err != nil {
			t.Fatalf("restore %s: %v", name, err)
		}
		if name == "v2" {
			mustEqualFile(t, out, want2)
		}
	}
}

// healDamagedCacheCopy damages the cached copy of a delta chunk of v2: s
// rebuilds it from its objects and restores v2 as want2.
func healDamagedCacheCopy(t *testing.T, s *Store, cache *Cache, v2 Manifest, dir string, want2 []byte) {
	t.Helper()
	if err := os.WriteFile(cache.path(v2.Chunks[9].Hash), []byte{formatRaw, 1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(context.Background(), v2, filepath.Join(dir, "healed")); err != nil {
		t.Fatalf("restore over a damaged cache copy: %v", err)
	}
	mustEqualFile(t, filepath.Join(dir, "healed"), want2)
}

// refuseLostDelta deletes a delta object of v2: Missing names it, Verify
// and Restore refuse.
func refuseLostDelta(t *testing.T, s, cold *Store, bl *memBlob, v2 Manifest, dir string) {
	t.Helper()
	ctx := context.Background()
	delete(bl.objs, s.Key(v2.Chunks[11].Delta))
	if miss, err := cold.Missing(ctx, v2); err != nil || len(miss) != 1 || miss[0].Hash != v2.Chunks[11].Delta {
		t.Errorf("missing: %v %v", miss, err)
	}
	if err := cold.Verify(ctx, v2); !isMissing(err) {
		t.Errorf("verify with a lost delta: %v", err)
	}
	if err := cold.Restore(ctx, v2, filepath.Join(dir, "lost")); !isMissing(err) {
		t.Errorf("restore with a lost delta: %v", err)
	}
}

// refuseCorruptDelta corrupts a delta object of v1: a fresh store catches
// it by its hash.
func refuseCorruptDelta(t *testing.T, s *Store, bl *memBlob, v1 Manifest, dir string) {
	t.Helper()
	bl.mutate(s.Key(v1.Chunks[2].Delta), func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
	fresh := newTestStore(t, Config{ChunkSize: s.ChunkSize()}, Deps{Blob: bl})
	if err := fresh.Restore(context.Background(), v1, filepath.Join(dir, "corrupt")); !isCorrupt(err) {
		t.Errorf("restore with a corrupt delta: %v", err)
	}
}
