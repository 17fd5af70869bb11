package chunk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	const c = testChunk
	tests := []struct {
		name      string
		segs      []seg
		wantZero  int64
		wantHoles bool // holes are expected to be detected without reading
	}{
		{name: "empty"},
		{name: "one byte", segs: []seg{{"rand", 1}}},
		{name: "exactly one chunk", segs: []seg{{"rand", c}}},
		{name: "one chunk plus one byte", segs: []seg{{"rand", c + 1}}},
		{name: "not a multiple", segs: []seg{{"rand", 3*c + c/2 + 7}}},
		{name: "zero regions", segs: []seg{{"rand", c}, {"zero", 2 * c}, {"rand", c / 2}, {"zero", c + c/2}, {"rand", 5}}, wantZero: 3},
		{name: "all zero", segs: []seg{{"zero", 4*c + 100}}, wantZero: 5},
		{name: "sparse holes", segs: []seg{{"rand", c}, {"hole", 3 * c}, {"rand", 10}, {"hole", 2*c - 10}, {"hole", 17}}, wantZero: 5, wantHoles: true},
		{name: "compressible", segs: []seg{{"text", 3 * c}, {"rand", c}}},
	}
	for _, tc := range tests {
		for _, comp := range []string{CompressionNone, CompressionZstd} {
			t.Run(tc.name+"/"+comp, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				path, want := genFile(t, dir, 1, tc.segs...)
				s := newTestStore(t, Config{Compression: comp}, Deps{Blob: newMemBlob()})
				m, st, err := s.PutFile(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				if m.Size != int64(len(want)) || int64(len(m.Chunks)) != NumChunks(m.Size, c) || st.Chunks != int64(len(m.Chunks)) {
					t.Fatalf("manifest size %d chunks %d stats %+v, want size %d", m.Size, len(m.Chunks), st, len(want))
				}
				if st.Zero != tc.wantZero || countZero(m) != tc.wantZero {
					t.Fatalf("zero chunks: stats %d manifest %d, want %d", st.Zero, countZero(m), tc.wantZero)
				}
				if tc.wantHoles && st.Holes == 0 {
					t.Logf("file system reported no holes (SEEK_DATA unsupported?)")
				}
				if st.Uploaded != st.Chunks-st.Zero-duplicates(m) {
					t.Fatalf("uploaded %d, want %d", st.Uploaded, st.Chunks-st.Zero)
				}
				enc, err := m.Encode()
				if err != nil {
					t.Fatal(err)
				}
				m2, err := Decode(enc)
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, "restored")
				if err := s.Restore(context.Background(), m2, dst); err != nil {
					t.Fatal(err)
				}
				mustEqualFile(t, dst, want)
				if tc.name == "all zero" {
					if n, ok := allocatedBytes(t, dst); ok && n != 0 {
						t.Fatalf("all-zero restore allocated %d bytes, want a hole", n)
					}
				}
				if err := s.Verify(context.Background(), m); err != nil {
					t.Fatal(err)
				}
				if err := s.VerifyData(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func countZero(m Manifest) (n int64) {
	for _, r := range m.Chunks {
		if r.IsZero() {
			n++
		}
	}
	return n
}

// duplicates counts non-zero chunks whose hash appeared earlier.
func duplicates(m Manifest) (n int64) {
	seen := map[string]bool{}
	for _, r := range m.Chunks {
		if !r.IsZero() {
			if seen[r.Hash] {
				n++
			}
			seen[r.Hash] = true
		}
	}
	return n
}

func TestSparseHolesNotRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const size = 1 << 30 // 1 GiB of hole plus one data chunk: must not read the hole
	path, _ := genFile(t, dir, 2, seg{"hole", size - testChunk}, seg{"rand", testChunk})
	if next, ok := probeHole(t, path); !ok || next == 0 {
		t.Skip("file system does not report holes via SEEK_DATA")
	}
	s := newTestStore(t, Config{}, Deps{Blob: newMemBlob()})
	m, st, err := s.PutFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Holes != st.Chunks-1 || st.Uploaded != 1 || m.Chunks[len(m.Chunks)-1].IsZero() {
		t.Fatalf("stats %+v: want every chunk but the last skipped as a hole", st)
	}
}

func probeHole(t *testing.T, path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return nextData(f, 0, 1<<30)
}

func TestDedup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, want := genFile(t, dir, 3, seg{"rand", 5 * testChunk}, seg{"zero", testChunk}, seg{"rand", 100})
	bs := newMemBlob()
	s := newTestStore(t, Config{}, Deps{Blob: bs})
	ctx := context.Background()
	_, st1, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Uploaded != 6 {
		t.Fatalf("first put uploaded %d, want 6", st1.Uploaded)
	}
	stats := bs.stats.Load()
	_, st2, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Uploaded != 0 || st2.Present != 6 || bs.stats.Load() != stats {
		t.Fatalf("second put: %+v, %d stats: want 0 uploads and no Stat (known set)", st2, bs.stats.Load()-stats)
	}
	// A fresh process has no known set: it asks the blob store.
	s2 := newTestStore(t, Config{}, Deps{Blob: bs})
	if _, st, err := s2.PutFile(ctx, path); err != nil || st.Uploaded != 0 || st.Present != 6 {
		t.Fatalf("fresh store put: %+v, %v: want 0 uploads", st, err)
	}
	// Change one byte: exactly one chunk is new.
	want[2*testChunk+17] ^= 0xff
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	m3, st3, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if st3.Uploaded != 1 || st3.UploadedBytes != testChunk {
		t.Fatalf("after one-byte change: %+v, want exactly one chunk uploaded", st3)
	}
	dst := filepath.Join(dir, "out")
	if err := s2.Restore(ctx, m3, dst); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, dst, want)
}

func TestCompressionIndependentHashes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, want := genFile(t, dir, 4, seg{"text", 4 * testChunk}, seg{"rand", 2 * testChunk}, seg{"zero", testChunk})
	ctx := context.Background()
	bsZ, bsN := newMemBlob(), newMemBlob()
	z := newTestStore(t, Config{Compression: CompressionZstd}, Deps{Blob: bsZ})
	n := newTestStore(t, Config{Compression: CompressionNone}, Deps{Blob: bsN})
	mz, stz, err := z.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	mn, stn, err := n.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ez, _ := mz.Encode()
	en, _ := mn.Encode()
	if !bytes.Equal(ez, en) {
		t.Fatalf("manifests differ:\nzstd %s\nnone %s", ez, en)
	}
	if strings.Join(bsZ.keys(), ",") != strings.Join(bsN.keys(), ",") {
		t.Fatal("object keys differ between compression settings")
	}
	if stz.StoredBytes >= stn.StoredBytes || stn.StoredBytes != stn.UploadedBytes+stn.Uploaded {
		t.Fatalf("stored bytes: zstd %d, none %d (uploaded %d): want zstd smaller", stz.StoredBytes, stn.StoredBytes, stn.UploadedBytes)
	}
	// A Store without compression reads zstd objects, and dedups against them.
	n2 := newTestStore(t, Config{Compression: CompressionNone}, Deps{Blob: bsZ})
	if _, st, err := n2.PutFile(ctx, path); err != nil || st.Uploaded != 0 {
		t.Fatalf("cross-compression put: %+v, %v: want 0 uploads", st, err)
	}
	dst := filepath.Join(dir, "out")
	if err := n2.Restore(ctx, mz, dst); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, dst, want)
}

func TestRestoreRefusesBadChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		comp    string
		damage  func(bs *memBlob, key string)
		wantErr error
	}{
		{"flipped raw byte", CompressionNone, func(bs *memBlob, k string) { bs.mutate(k, flip(100)) }, ErrCorrupt},
		{"flipped zstd byte", CompressionZstd, func(bs *memBlob, k string) { bs.mutate(k, flip(20)) }, ErrCorrupt},
		{"truncated", CompressionNone, func(bs *memBlob, k string) { bs.mutate(k, func(b []byte) []byte { return b[:len(b)-1] }) }, ErrCorrupt},
		{"empty object", CompressionNone, func(bs *memBlob, k string) { bs.mutate(k, func([]byte) []byte { return nil }) }, ErrCorrupt},
		{"unknown format", CompressionNone, func(bs *memBlob, k string) { bs.mutate(k, func(b []byte) []byte { b[0] = 9; return b }) }, ErrCorrupt},
		{"too long", CompressionNone, func(bs *memBlob, k string) { bs.mutate(k, func(b []byte) []byte { return append(b, 0) }) }, ErrCorrupt},
		{"deleted", CompressionNone, func(bs *memBlob, k string) { _ = bs.Delete(context.Background(), k) }, ErrMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path, _ := genFile(t, dir, 5, seg{"text", 2 * testChunk}, seg{"rand", 3 * testChunk})
			bs := newMemBlob()
			s := newTestStore(t, Config{Compression: tc.comp}, Deps{Blob: bs})
			ctx := context.Background()
			m, _, err := s.PutFile(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			victim := m.Chunks[1].Hash
			tc.damage(bs, s.Key(victim))
			dst := filepath.Join(dir, "vm.mem")
			if err := os.WriteFile(dst, []byte("previous"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := dirNames(t, dir)
			err = s.Restore(ctx, m, dst)
			var ce *ChunkError
			if !errors.Is(err, tc.wantErr) || !errors.As(err, &ce) || ce.Hash != victim || ce.Index != 1 {
				t.Fatalf("restore error %v: want %v naming chunk 1 (%s)", err, tc.wantErr, victim)
			}
			mustEqualFile(t, dst, []byte("previous"))
			if after := dirNames(t, dir); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("restore left files behind: %v, before %v", after, before)
			}
			if err := s.VerifyData(ctx, m); !errors.Is(err, tc.wantErr) {
				t.Fatalf("VerifyData error %v, want %v", err, tc.wantErr)
			}
			missing, err := s.Missing(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			verr := s.Verify(ctx, m)
			switch tc.name {
			case "deleted":
				if !errors.Is(verr, ErrMissing) || !strings.Contains(verr.Error(), victim) {
					t.Fatalf("Verify error %v: want ErrMissing naming %s", verr, victim)
				}
				if len(missing) != 1 || missing[0].Hash != victim {
					t.Fatalf("Missing = %v, want [%s]", missing, victim)
				}
			case "empty object", "too long":
				if !errors.Is(verr, ErrCorrupt) || len(missing) != 1 {
					t.Fatalf("Verify error %v, Missing %v: want the impossible size caught", verr, missing)
				}
			}
		})
	}
}

func flip(at int) func([]byte) []byte {
	return func(b []byte) []byte { b[min(at, len(b)-1)] ^= 0x01; return b }
}

func TestRestoreHealsCorruptCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, want := genFile(t, dir, 6, seg{"rand", 3 * testChunk})
	cache, err := NewCache(CacheConfig{Dir: filepath.Join(dir, "cache"), MaxBytes: 1 << 30}, CacheDeps{})
	if err != nil {
		t.Fatal(err)
	}
	bs := newMemBlob()
	s := newTestStore(t, Config{}, Deps{Blob: bs, Cache: cache})
	ctx := context.Background()
	m, _, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cache.Stats().Entries; got != 3 {
		t.Fatalf("PutFile cached %d chunks, want 3", got)
	}
	// Restoring from a warm cache reads nothing from the blob store.
	if err := s.Restore(ctx, m, filepath.Join(dir, "warm")); err != nil || bs.gets.Load() != 0 {
		t.Fatalf("warm restore: %v, %d blob gets: want 0", err, bs.gets.Load())
	}
	h := m.Chunks[0].Hash
	if err := os.WriteFile(cache.path(h), []byte{0, 1, 2}, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "out")
	if err := s.Restore(ctx, m, dst); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, dst, want)
	if bs.gets.Load() != 1 {
		t.Fatalf("blob gets %d, want 1 (only the bad cached chunk)", bs.gets.Load())
	}
	obj, ok, err := cache.Get(h, nil)
	if err != nil || !ok || len(obj) != testChunk+1 {
		t.Fatalf("cache copy not repaired: len %d ok %v err %v", len(obj), ok, err)
	}
}

func TestRefreshStaleObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, _ := genFile(t, dir, 7, seg{"rand", 2 * testChunk})
	clock := newFakeClock()
	bs := newMemBlob()
	bs.now = clock.Now
	ctx := context.Background()
	s := newTestStore(t, Config{RefreshAfter: time.Hour}, Deps{Blob: bs, Now: clock.Now})
	m, _, err := s.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(50 * time.Minute)
	if _, st, _ := s.PutFile(ctx, path); st.Uploaded != 0 {
		t.Fatalf("fresh objects re-uploaded: %+v", st)
	}
	bs.setModTime(s.Key(m.Chunks[0].Hash), clock.Now().Add(-2*time.Hour))
	s2 := newTestStore(t, Config{RefreshAfter: time.Hour}, Deps{Blob: bs, Now: clock.Now})
	_, st, err := s2.PutFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Refreshed != 1 || st.Uploaded != 1 || st.Present != 1 {
		t.Fatalf("stats %+v: want the stale object refreshed, the other reused", st)
	}
	info, _ := bs.Stat(ctx, s.Key(m.Chunks[0].Hash))
	if !info.ModTime.Equal(clock.Now()) {
		t.Fatalf("refreshed ModTime %v, want %v", info.ModTime, clock.Now())
	}
}

func TestPutReader(t *testing.T) {
	t.Parallel()
	_, want := genFile(t, t.TempDir(), 8, seg{"rand", 2*testChunk + 3}, seg{"zero", testChunk})
	tests := []struct {
		name    string
		size    int64
		data    []byte
		wantErr bool
	}{
		{"known size", int64(len(want)), want, false},
		{"unknown size", -1, want, false},
		{"unknown size, exact chunks", -1, want[:2*testChunk], false},
		{"unknown size, empty", -1, nil, false},
		{"short stream", int64(len(want)) + 1, want, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, Config{}, Deps{Blob: newMemBlob()})
			ctx := context.Background()
			m, _, err := s.PutReader(ctx, bytes.NewReader(tc.data), tc.size)
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "out")
			if err := s.Restore(ctx, m, dst); err != nil {
				t.Fatal(err)
			}
			mustEqualFile(t, dst, tc.data)
		})
	}
}

func TestPutFailsOnUploadError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, _ := genFile(t, dir, 9, seg{"rand", 20 * testChunk})
	bs := newMemBlob()
	bs.putErr = errors.New("disk full")
	s := newTestStore(t, Config{}, Deps{Blob: bs})
	_, _, err := s.PutFile(context.Background(), path)
	var ce *ChunkError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "put file") {
		t.Fatalf("error %v: want a ChunkError wrapping the upload failure", err)
	}
	if _, _, err := s.PutFile(context.Background(), filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
	if _, _, err := s.PutFile(context.Background(), dir); err == nil {
		t.Fatal("a directory was accepted")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		deps Deps
	}{
		{"no blob", Config{}, Deps{}},
		{"chunk size not page multiple", Config{ChunkSize: 5000}, Deps{Blob: newMemBlob()}},
		{"chunk size too big", Config{ChunkSize: 128 << 20}, Deps{Blob: newMemBlob()}},
		{"compression", Config{Compression: "lz4"}, Deps{Blob: newMemBlob()}},
		{"parallel", Config{Parallel: -1}, Deps{Blob: newMemBlob()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if s, err := New(tc.cfg, tc.deps); err == nil {
				s.Close()
				t.Fatal("want an error")
			}
		})
	}
}
