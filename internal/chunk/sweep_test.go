package chunk

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	bs := newMemBlob()
	bs.now = clock.Now
	s := newTestStore(t, Config{KeyPrefix: "chunks"}, Deps{Blob: bs, Now: clock.Now})
	put := func(seed uint64) Manifest {
		path, _ := genFile(t, t.TempDir(), seed, seg{"rand", 2 * testChunk})
		m, _, err := s.PutFile(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	reachableM := put(1) // committed, old
	garbageM := put(2)   // unreachable, old
	clock.Advance(48 * time.Hour)
	inflightM := put(3) // unreachable (not yet committed) but young
	if err := bs.Put(ctx, "chunks/readme.txt", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := bs.Put(ctx, "other/"+reachableM.Chunks[0].Hash, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	reach := map[string]bool{}
	for _, r := range reachableM.Chunks {
		reach[r.Hash] = true
	}
	st, err := Sweep(ctx, bs, "chunks/", func(h string) bool { return reach[h] }, clock.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := SweepStats{Scanned: 6, Reachable: 2, Young: 2, Deleted: 2, DeletedBytes: 2 * (testChunk + 1), Foreign: 1}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	for _, m := range []Manifest{reachableM, inflightM} {
		if miss, err := s.Missing(ctx, m); err != nil || len(miss) != 0 {
			t.Fatalf("kept manifest lost chunks: %v %v", miss, err)
		}
	}
	if miss, _ := s.Missing(ctx, garbageM); len(miss) != 2 {
		t.Fatalf("garbage not deleted: missing %v", miss)
	}
	if _, err := bs.Stat(ctx, "other/"+reachableM.Chunks[0].Hash); err != nil {
		t.Fatal("sweep touched keys outside its prefix")
	}
}

func TestSweepKeepsObjectsRefreshedAfterListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	bs := newMemBlob()
	bs.now = clock.Now
	s := newTestStore(t, Config{}, Deps{Blob: bs, Now: clock.Now})
	path, _ := genFile(t, t.TempDir(), 4, seg{"rand", testChunk})
	m, _, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(48 * time.Hour)
	key := s.Key(m.Chunks[0].Hash)
	// The object is re-put (refreshed) between the listing and the delete.
	st, err := Sweep(ctx, bs, "", func(string) bool {
		bs.setModTime(key, clock.Now())
		return false
	}, clock.Now().Add(-24*time.Hour))
	if err != nil || st.Deleted != 0 || st.Young != 1 {
		t.Fatalf("stats %+v err %v: want the refreshed object kept", st, err)
	}
}
