package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

const mib = 1 << 20

var errBoom = errors.New("blobtest: reader failed on purpose")

// plainReader hides optional interfaces (ReaderAt, Seeker, WriterTo), so
// backends see a pure stream.
type plainReader struct{ r io.Reader }

func (p *plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// stream is n deterministic pseudo-random bytes generated on the fly.
func stream(seed uint64, n int64) io.Reader {
	return &plainReader{io.LimitReader(rand.NewChaCha8(seedBytes(seed)), n)}
}

func seedBytes(seed uint64) [32]byte {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

func streamSum(t testing.TB, seed uint64, n int64) [32]byte {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, stream(seed, n)); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// failAfter yields n bytes of r, then fails with errBoom.
type failAfter struct {
	r    io.Reader
	left int64
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, errBoom
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= int64(n)
	return n, err
}

// hookAfter calls hook once n bytes have been read, then keeps yielding
// data; the read that fires the hook returns a single byte, so the body is
// still unfinished when the hook has run.
type hookAfter struct {
	r     io.Reader
	left  int64
	hook  func()
	fired bool
}

func (h *hookAfter) Read(p []byte) (int, error) {
	if h.left <= 0 && !h.fired {
		h.fired = true
		h.hook()
		p = p[:min(len(p), 1)]
	}
	if h.left > 0 && int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

func mustPut(t testing.TB, s blob.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func mustGet(t testing.TB, s blob.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", key, err)
	}
	return b
}

func getSum(t testing.TB, s blob.Store, key string) ([32]byte, int64) {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", key, err)
	}
	return [32]byte(h.Sum(nil)), n
}

func listInfos(t testing.TB, s blob.Store, prefix string) []blob.Info {
	t.Helper()
	var out []blob.Info
	err := s.List(context.Background(), prefix, func(i blob.Info) error {
		out = append(out, i)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return out
}

func listKeys(t testing.TB, s blob.Store, prefix string) []string {
	t.Helper()
	keys := []string{}
	for _, i := range listInfos(t, s, prefix) {
		keys = append(keys, i.Key)
	}
	return keys
}

func wantNotFound(t testing.TB, s blob.Store, key string) {
	t.Helper()
	ctx := context.Background()
	if rc, err := s.Get(ctx, key); !errors.Is(err, blob.ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat(%q) = %v, want ErrNotFound", key, err)
	}
}

func wantEmpty(t testing.TB, s blob.Store) {
	t.Helper()
	if keys := listKeys(t, s, ""); len(keys) != 0 {
		t.Errorf("List(\"\") = %q, want no objects", keys)
	}
}

// uniform is n bytes of b: a whole version is recognisable by its length
// and content, a torn one is not.
func uniform(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
