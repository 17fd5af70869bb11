package chunk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/blob/localdir"
)

// TestConcurrentPutRestore shares one Store, blob store and cache between
// goroutines that put overlapping files and restore them (run with -race).
func TestConcurrentPutRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cache, err := NewCache(CacheConfig{Dir: filepath.Join(dir, "cache"), MaxBytes: 8 * testChunk}, CacheDeps{})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Config{Compression: CompressionZstd, Parallel: 3}, Deps{Blob: newMemBlob(), Cache: cache})
	// Files share their first chunks, so goroutines race on the same objects.
	common, commonData := genFile(t, dir, 100, seg{"text", 2 * testChunk}, seg{"rand", 2 * testChunk})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			path, tail := genFile(t, dir, uint64(g), seg{"rand", 3*testChunk + 11}, seg{"zero", testChunk})
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Error(err)
				return
			}
			full := append(append([]byte{}, commonData...), tail...)
			_, err = f.WriteAt(full, 0)
			f.Close()
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 3 {
				src := path
				want := full
				if i == 1 {
					src, want = common, commonData
				}
				m, _, err := s.PutFile(context.Background(), src)
				if err != nil {
					t.Error(err)
					return
				}
				dst := filepath.Join(dir, fmt.Sprintf("out-%d-%d", g, i))
				if err := s.Restore(context.Background(), m, dst); err != nil {
					t.Error(err)
					return
				}
				got, err := os.ReadFile(dst)
				if err != nil || string(got) != string(want) {
					t.Errorf("goroutine %d round %d: restored content differs (%v)", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := cache.Stats(); st.Bytes > 8*testChunk {
		t.Fatalf("cache over budget: %+v", st)
	}
}

// TestLocalDirBackend runs the round trip, dedup and corruption checks
// against the real local-directory blob store.
func TestLocalDirBackend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bs, err := localdir.New(localdir.Config{Dir: filepath.Join(dir, "blobs")}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := newTestStore(t, Config{Compression: CompressionZstd}, Deps{Blob: bs})
	path, want := genFile(t, dir, 11, seg{"text", testChunk}, seg{"rand", 2*testChunk + 5}, seg{"hole", 3 * testChunk})
	m, st, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Uploaded != 4 || st.Zero != 3 {
		t.Fatalf("stats %+v", st)
	}
	s2 := newTestStore(t, Config{}, Deps{Blob: bs})
	if _, st, err := s2.PutFile(ctx, path); err != nil || st.Uploaded != 0 || st.Present != 4 {
		t.Fatalf("second put: %+v %v", st, err)
	}
	dst := filepath.Join(dir, "out")
	if err := s2.Restore(ctx, m, dst); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, dst, want)
	// Flip one byte of a stored object on disk.
	objPath := filepath.Join(bs.Dir(), filepath.FromSlash(s.Key(m.Chunks[1].Hash)))
	b, err := os.ReadFile(objPath)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(objPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	dst2 := filepath.Join(dir, "out2")
	if err := s2.Restore(ctx, m, dst2); !isCorrupt(err) {
		t.Fatalf("restore of a flipped byte: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(dst2); !os.IsNotExist(err) {
		t.Fatalf("dst exists after a failed restore: %v", err)
	}
	if err := os.Remove(objPath); err != nil {
		t.Fatal(err)
	}
	if err := s2.Verify(ctx, m); !isMissing(err) {
		t.Fatalf("verify after delete: %v, want ErrMissing", err)
	}
}
