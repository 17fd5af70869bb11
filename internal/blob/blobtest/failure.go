package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

var invalidKeys = []struct {
	name, key string
}{
	{"empty", ""},
	{"leading slash", "/a"},
	{"trailing slash", "a/"},
	{"double slash", "a//b"},
	{"dotdot first", "../x"},
	{"dotdot inside", "a/../b"},
	{"dotdot alone", ".."},
	{"dot inside", "a/./b"},
	{"dot alone", "."},
	{"NUL", "a\x00b"},
	{"space", "a b"},
	{"backslash", `a\b`},
	{"colon", "a:b"},
	{"tilde", "a/~tmp"},
	{"percent", "a%2Fb"},
	{"non-ASCII", "caf\u00e9"},
	{"newline", "a\nb"},
	{"1025 bytes", strings.Repeat("k/", 512) + "k"},
	{"256-byte segment", "a/" + strings.Repeat("s", 256)},
}

func testInvalidKeys(t *testing.T, s blob.Store) {
	ctx := context.Background()
	for _, tc := range invalidKeys {
		err := s.Put(ctx, tc.key, strings.NewReader("data"), 4)
		if !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("%s: Put(%q) = %v, want ErrInvalidKey", tc.name, tc.key, err)
		}
		err = s.Put(ctx, tc.key, &plainReader{strings.NewReader("data")}, -1)
		if !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("%s: Put(%q, size -1) = %v, want ErrInvalidKey", tc.name, tc.key, err)
		}
		if rc, err := s.Get(ctx, tc.key); !errors.Is(err, blob.ErrInvalidKey) {
			if err == nil {
				rc.Close()
			}
			t.Errorf("%s: Get(%q) = %v, want ErrInvalidKey", tc.name, tc.key, err)
		}
		if _, err := s.Stat(ctx, tc.key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("%s: Stat(%q) = %v, want ErrInvalidKey", tc.name, tc.key, err)
		}
		if err := s.Delete(ctx, tc.key); !errors.Is(err, blob.ErrInvalidKey) {
			t.Errorf("%s: Delete(%q) = %v, want ErrInvalidKey", tc.name, tc.key, err)
		}
	}
	wantEmpty(t, s)
	// Nothing reachable through a normalised form either.
	wantNotFound(t, s, "x")
	wantNotFound(t, s, "a/b")
}

// testFailedPut: a reader that fails midway leaves no object, and does not
// clobber an existing one, for small and multipart-sized bodies.
func testFailedPut(t *testing.T, s blob.Store) {
	ctx := context.Background()
	old := []byte("old version")
	cases := []struct {
		total, failAt int64
	}{
		{4096, 1000},
		{4096, 0},
		{24 * mib, 13 * mib},
	}
	for _, c := range cases {
		for _, size := range []int64{c.total, -1} {
			name := fmt.Sprintf("total=%d,fail_at=%d,size=%d", c.total, c.failAt, size)
			fresh := "fresh/" + strings.NewReplacer("=", "-", ",", ".").Replace(name)
			existing := "existing/" + strings.NewReplacer("=", "-", ",", ".").Replace(name)
			mustPut(t, s, existing, old)
			for _, key := range []string{fresh, existing} {
				r := &failAfter{r: stream(7, c.total), left: c.failAt}
				err := s.Put(ctx, key, r, size)
				if !errors.Is(err, errBoom) {
					t.Errorf("%s: Put(%q) = %v, want the reader's error", name, key, err)
				}
			}
			wantNotFound(t, s, fresh)
			if got := mustGet(t, s, existing); !bytes.Equal(got, old) {
				t.Errorf("%s: existing object changed to %d bytes", name, len(got))
			}
		}
	}
	for _, k := range listKeys(t, s, "") {
		if strings.HasPrefix(k, "fresh/") {
			t.Errorf("List shows %q from a failed Put", k)
		}
	}
}

// testShortRead: a reader with fewer bytes than size fails the Put.
func testShortRead(t *testing.T, s blob.Store) {
	ctx := context.Background()
	mustPut(t, s, "existing", []byte("old"))
	for _, n := range []int64{10, 6 * mib} {
		for _, key := range []string{"fresh", "existing"} {
			err := s.Put(ctx, key, &plainReader{io.LimitReader(stream(3, n), n/2)}, n)
			if err == nil {
				t.Errorf("Put(%q) of %d bytes from a %d-byte reader succeeded", key, n, n/2)
			}
		}
		wantNotFound(t, s, "fresh")
		if got := mustGet(t, s, "existing"); string(got) != "old" {
			t.Errorf("existing object changed to %d bytes after a short read", len(got))
		}
	}
}
