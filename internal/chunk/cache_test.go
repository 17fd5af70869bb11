package chunk

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// obj returns a distinct test object of n bytes and its hash.
func testObj(i, n int) (string, []byte) {
	b := bytes.Repeat([]byte{byte(i)}, n)
	copy(b, fmt.Sprint(i))
	return hashHex(sha256.Sum256(b)), b
}

func openCache(t *testing.T, dir string, max int64, clock *fakeClock) *Cache {
	t.Helper()
	c, err := NewCache(CacheConfig{Dir: dir, MaxBytes: max}, CacheDeps{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		touch    []int // objects read after all puts, in order
		wantKept []int // oldest use first
	}{
		{"no reads: oldest puts go", nil, []int{2, 3, 4}},
		{"read keeps an old one", []int{0}, []int{0, 3, 4}},
		{"reads in order", []int{1, 0}, []int{0, 3, 4}},
		{"later read wins", []int{0, 1}, []int{1, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			clock := newFakeClock()
			c := openCache(t, dir, 3*1000, clock)
			hs := make([]string, 5)
			for i := range 3 {
				clock.Advance(time.Minute)
				h, b := testObj(i, 1000)
				hs[i] = h
				if err := c.Put(h, b); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.touch {
				clock.Advance(time.Minute)
				if _, ok, err := c.Get(hs[i], nil); !ok || err != nil {
					t.Fatalf("get %d: ok %v err %v", i, ok, err)
				}
			}
			for i := 3; i < 5; i++ {
				clock.Advance(time.Minute)
				h, b := testObj(i, 1000)
				hs[i] = h
				if err := c.Put(h, b); err != nil {
					t.Fatal(err)
				}
			}
			checkKept(t, c, hs, tc.wantKept)
			if st := c.Stats(); st.Bytes != 3000 || st.Evictions != 2 || st.Entries != 3 {
				t.Fatalf("stats %+v", st)
			}
			// Reopening rebuilds the same contents and LRU order from mtimes.
			c2 := openCache(t, dir, 3*1000, clock)
			checkKept(t, c2, hs, tc.wantKept)
			clock.Advance(time.Minute)
			h, b := testObj(9, 1000)
			if err := c2.Put(h, b); err != nil {
				t.Fatal(err)
			}
			checkKept(t, c2, append(hs, h), append(tc.wantKept[1:], 5))
		})
	}
}

func checkKept(t *testing.T, c *Cache, hs []string, want []int) {
	t.Helper()
	keep := map[int]bool{}
	for _, i := range want {
		keep[i] = true
	}
	for i, h := range hs {
		if c.Has(h) != keep[i] {
			t.Fatalf("object %d cached = %v, want %v (want kept %v)", i, c.Has(h), keep[i], want)
		}
	}
}

func TestCacheReopenShrinksToBudgetAndCleansUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	c := openCache(t, dir, 10_000, clock)
	var hs []string
	for i := range 5 {
		clock.Advance(time.Minute)
		h, b := testObj(i, 1000)
		hs = append(hs, h)
		if err := c.Put(h, b); err != nil {
			t.Fatal(err)
		}
	}
	leftover := filepath.Join(dir, "tmp", "crashed-put")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, dir, 2000, clock)
	checkKept(t, c2, hs, []int{3, 4})
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("temp leftover survived reopen: %v", err)
	}
	_, b := testObj(0, 1000)
	if got, ok, err := c2.Get(hs[4], nil); !ok || err != nil || len(got) != len(b) {
		t.Fatalf("get after reopen: ok %v err %v", ok, err)
	}
}

func TestCacheEdgeCases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	c := openCache(t, dir, 1500, clock)
	hBig, big := testObj(1, 2000)
	if err := c.Put(hBig, big); err != nil || c.Has(hBig) {
		t.Fatalf("object over budget: err %v cached %v; want skipped", err, c.Has(hBig))
	}
	if err := c.Put("not-a-hash", []byte("x")); err == nil {
		t.Fatal("bad hash accepted")
	}
	h, b := testObj(2, 1000)
	if err := c.Put(h, b); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(h, b); err != nil || c.Stats().Puts != 1 {
		t.Fatalf("second put of the same hash: %v, puts %d", err, c.Stats().Puts)
	}
	if err := os.Remove(c.path(h)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Get(h, nil); ok || err != nil || c.Has(h) || c.Stats().Bytes != 0 {
		t.Fatalf("file deleted behind the cache: ok %v err %v stats %+v", ok, err, c.Stats())
	}
	if _, err := NewCache(CacheConfig{Dir: dir}, CacheDeps{}); err == nil {
		t.Fatal("zero budget accepted")
	}
}

func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	c, err := NewCache(CacheConfig{Dir: t.TempDir(), MaxBytes: 20 * 512}, CacheDeps{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				h, b := testObj((g*7+i)%40, 512)
				if err := c.Put(h, b); err != nil {
					t.Error(err)
					return
				}
				got, ok, err := c.Get(h, make([]byte, 0, 512))
				if err != nil {
					t.Error(err)
					return
				}
				if ok && !bytes.Equal(got, b) {
					t.Errorf("object %d: wrong content", i)
					return
				}
				if i%17 == 0 {
					c.Remove(h)
				}
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	if st.Bytes > 20*512 || int64(st.Entries)*512 != st.Bytes {
		t.Fatalf("stats after concurrent use: %+v", st)
	}
	n := 0
	_ = filepath.WalkDir(c.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != st.Entries {
		t.Fatalf("%d files on disk, index has %d", n, st.Entries)
	}
}

// readLog is a CacheReads that records each read.
type readLog struct {
	mu   sync.Mutex
	hits []bool
}

func (r *readLog) ChunkCacheRead(hit bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits = append(r.hits, hit)
}

// TestCacheReportsReads: every Get tells Reads whether it hit, including a
// file removed behind the cache's back (a miss).
func TestCacheReportsReads(t *testing.T) {
	t.Parallel()
	obs := &readLog{}
	c, err := NewCache(CacheConfig{Dir: t.TempDir(), MaxBytes: 1 << 20}, CacheDeps{Reads: obs})
	if err != nil {
		t.Fatal(err)
	}
	h, b := testObj(1, 100)
	gone, b2 := testObj(2, 100)
	for _, p := range []struct {
		h string
		b []byte
	}{{h, b}, {gone, b2}} {
		if err := c.Put(p.h, p.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(c.path(gone)); err != nil {
		t.Fatal(err)
	}
	other, _ := testObj(3, 100)
	for _, k := range []string{h, other, gone, h} {
		if _, _, err := c.Get(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []bool{true, false, false, true}
	if fmt.Sprint(obs.hits) != fmt.Sprint(want) {
		t.Fatalf("reads reported = %v, want %v", obs.hits, want)
	}
	if s := c.Stats(); s.Hits != 2 || s.Misses != 2 {
		t.Fatalf("stats = %+v, want 2 hits and 2 misses", s)
	}
}
