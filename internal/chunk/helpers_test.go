package chunk

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

const testChunk = 64 << 10 // small chunks keep tests fast

// seg is one region of a generated test file.
type seg struct {
	kind string // "rand", "zero" (written zeros), "hole" (never written), "text" (compressible)
	n    int64
}

// genFile writes the segments to a new file in dir and returns its path and content.
func genFile(t testing.TB, dir string, seed uint64, segs ...seg) (string, []byte) {
	t.Helper()
	var total int64
	for _, s := range segs {
		total += s.n
	}
	want := make([]byte, total)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	path := filepath.Join(dir, "file-"+randName(rng))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for _, s := range segs {
		b := want[off : off+s.n]
		switch s.kind {
		case "rand":
			fillRand(rng, b)
		case "text":
			for i := range b {
				b[i] = "engrams chunk store "[(int(off)+i)%20]
			}
		}
		if s.kind != "hole" {
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		off += s.n
	}
	if err := f.Truncate(total); err != nil {
		t.Fatal(err)
	}
	return path, want
}

func fillRand(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		v := rng.Uint64()
		for i := range 8 {
			b[i] = byte(v >> (8 * i))
		}
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func randName(rng *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 10)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
}

// newTestStore builds a Store over bs, closed at cleanup.
func newTestStore(t testing.TB, cfg Config, deps Deps) *Store {
	t.Helper()
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = testChunk
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 4
	}
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// mustEqualFile fails unless the file at path holds want.
func mustEqualFile(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs (len %d, want %d)", path, len(got), len(want))
	}
}

// dirNames lists a directory's entries.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func isCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

func isMissing(err error) bool { return errors.Is(err, ErrMissing) }

// testCache is a 64 MiB chunk cache in a temp dir.
func testCache(t testing.TB) *Cache {
	t.Helper()
	cache, err := NewCache(CacheConfig{Dir: t.TempDir(), MaxBytes: 64 << 20}, CacheDeps{})
	if err != nil {
		t.Fatal(err)
	}
	return cache
}
