package chunk

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPutChanged: only the chunks said changed are read (the rest keep
// the parent's refs even where the file differs, proving they were not
// read), changed ones go up as deltas, and ReadChunk gives every chunk of
// the result back verified, from a store that never saw the file.
func TestPutChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const cs = 64 << 10
	bl := newMemBlob()
	cache := testCache(t)
	s := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl, Cache: cache})
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 16*cs)
	fillRand(rng, data[:12*cs])
	path := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	v0, _, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	data[3*cs+100] ^= 1  // changed, and said so
	data[14*cs+5] = 7    // a zero chunk becomes non-zero, said so
	data[7*cs+9] ^= 0xff // changed but not said: must keep v0's ref
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	changed := map[int]bool{3: true, 14: true}
	v1, st, err := s.PutChanged(ctx, f, v0, func(i int) bool { return changed[i] }, noFill(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Unchanged != 14 || st.Chunks != 16 || st.Deltas != 1 || v1.Size != v0.Size {
		t.Fatalf("stats %+v, size %d", st, v1.Size)
	}
	for i, r := range v1.Chunks {
		if !changed[i] && r != v0.Chunks[i] {
			t.Fatalf("chunk %d: %v, want the parent's %v", i, r, v0.Chunks[i])
		}
	}
	data[7*cs+9] ^= 0xff // what v1 says chunk 7 holds
	cold := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl})
	buf := make([]byte, cs)
	for i := range v1.Chunks {
		if err := cold.ReadChunk(ctx, v1, i, buf); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !bytes.Equal(buf, data[i*cs:(i+1)*cs]) {
			t.Fatalf("chunk %d differs", i)
		}
	}
	if err := cold.ReadChunk(ctx, v1, 16, buf); !errors.Is(err, ErrInvalidManifest) {
		t.Fatalf("chunk past the end: %v", err)
	}
	if _, _, err := newTestStore(t, Config{ChunkSize: cs * 2}, Deps{Blob: bl}).PutChanged(ctx, f, v0, func(int) bool { return true }, noFill(t)); err == nil {
		t.Fatal("a parent of another chunk size was taken")
	}
	bl.mu.Lock()
	delete(bl.objs, cold.Key(v1.Chunks[3].Delta))
	bl.mu.Unlock()
	if err := cold.ReadChunk(ctx, v1, 3, buf); !isMissing(err) {
		t.Fatalf("lost delta: %v", err)
	}
}

// TestBlindPut: with BlindPut a chunk this host never saw is put without a
// Stat; one the cache holds is asked about (and found) as before; the
// stored result reads back the same either way.
func TestBlindPut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const cs = 64 << 10
	bl := newMemBlob()
	cache := testCache(t)
	path, want := genFile(t, t.TempDir(), 9, seg{"rand", 6 * cs}, seg{"zero", 2 * cs})
	// Another host stored the first chunks already.
	other := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl})
	if _, _, err := other.PutReader(ctx, bytes.NewReader(want[:2*cs]), 2*cs); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Config{ChunkSize: cs, BlindPut: true}, Deps{Blob: bl, Cache: cache})
	stats, puts := bl.stats.Load(), bl.puts.Load()
	m, st, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got := bl.stats.Load() - stats; got != 0 {
		t.Fatalf("%d stats for chunks this host never saw, want none", got)
	}
	if got := bl.puts.Load() - puts; got != 6 || st.Uploaded != 6 {
		t.Fatalf("%d puts (%+v), want all 6 non-zero chunks", got, st)
	}
	fresh := newTestStore(t, Config{ChunkSize: cs, BlindPut: true}, Deps{Blob: bl, Cache: cache})
	stats = bl.stats.Load()
	if _, st, err := fresh.PutFile(ctx, path); err != nil || st.Present != 6 || bl.stats.Load()-stats != 6 {
		t.Fatalf("chunks the cache holds: %+v, %d stats, %v; want asked about and present", st, bl.stats.Load()-stats, err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl}).Restore(ctx, m, out); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, want)
}

// noFill is a PutChanged fill that fails the test: every kept ref is fresh.
func noFill(t *testing.T) func(int) error {
	return func(i int) error {
		t.Errorf("chunk %d filled: its kept ref should have been fresh", i)
		return nil
	}
}

// TestPutChangedStaleKeptRef: a kept ref whose object is missing or too
// old in the blob store is not kept blindly: the chunk is filled, read and
// stored again, so the new manifest names only fresh objects; a chunk that
// cannot be filled fails the capture.
func TestPutChangedStaleKeptRef(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const cs = 64 << 10
	bl := newMemBlob()
	now := time.Now()
	bl.now = func() time.Time { return now }
	s := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl, Now: func() time.Time { return now }})
	path, data := genFile(t, t.TempDir(), 11, seg{"rand", 4 * cs})
	v0, _, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// Another process (no memory of those puts) captures 13h later; chunk
	// 1's object was swept meanwhile, the others are stale.
	later := now.Add(13 * time.Hour)
	fresh := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl, Now: func() time.Time { return later }})
	bl.mu.Lock()
	delete(bl.objs, fresh.Key(v0.Chunks[1].Hash))
	bl.mu.Unlock()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		mu     sync.Mutex
		filled []int
	)
	fill := func(i int) error { mu.Lock(); defer mu.Unlock(); filled = append(filled, i); return nil }
	v1, st, err := fresh.PutChanged(ctx, f, v0, func(int) bool { return false }, fill)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(filled)
	if !slices.Equal(filled, []int{0, 1, 2, 3}) || st.Uploaded != 4 || st.Unchanged != 0 {
		t.Fatalf("filled %v, stats %+v; want every stale or missing chunk stored again", filled, st)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl}).Restore(ctx, v1, out); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, out, data)
	// A second capture by the same store keeps them: it knows them fresh.
	if _, st, err := fresh.PutChanged(ctx, f, v1, func(int) bool { return false }, noFill(t)); err != nil || st.Unchanged != 4 {
		t.Fatalf("second capture: %+v %v", st, err)
	}
	bl.mu.Lock()
	delete(bl.objs, fresh.Key(v0.Chunks[2].Hash))
	bl.mu.Unlock()
	cold := newTestStore(t, Config{ChunkSize: cs}, Deps{Blob: bl, Now: func() time.Time { return later }})
	if _, _, err := cold.PutChanged(ctx, f, v1, func(int) bool { return false }, func(int) error { return ErrMissing }); !isMissing(err) {
		t.Fatalf("a chunk that cannot be filled: %v", err)
	}
}
