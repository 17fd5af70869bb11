package blobtest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob"
)

// Run runs the conformance suite. open must return a fresh, empty store
// (its own directory, bucket or prefix) for each call and release it via
// t.Cleanup; subtests call it in parallel.
func Run(t *testing.T, open func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Empty", testEmpty},
		{"ExactSize", testExactSize},
		{"Large", testLarge},
		{"LongKey", testLongKey},
		{"InvalidKeys", testInvalidKeys},
		{"NotFound", testNotFound},
		{"DeleteMissing", testDeleteMissing},
		{"PrefixKeyConflict", testPrefixKeyConflict},
		{"ListOrder", testListOrder},
		{"ListPrefix", testListPrefix},
		{"ListStop", testListStop},
		{"FailedPut", testFailedPut},
		{"ShortRead", testShortRead},
		{"ConcurrentDistinct", testConcurrentDistinct},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"CancelledContext", testCancelledContext},
		{"CancelMidPut", testCancelMidPut},
		{"CancelMidGet", testCancelMidGet},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func testRoundTrip(t *testing.T, s blob.Store) {
	ctx := context.Background()
	data := []byte("hello, blob")
	before := time.Now().Add(-2 * time.Second)
	mustPut(t, s, "a/b/c", data)
	after := time.Now().Add(2 * time.Second)
	if got := mustGet(t, s, "a/b/c"); !bytes.Equal(got, data) {
		t.Errorf("Get = %q, want %q", got, data)
	}
	info, err := s.Stat(ctx, "a/b/c")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if info.Key != "a/b/c" || info.Size != int64(len(data)) {
		t.Errorf("Stat = %+v, want key a/b/c size %d", info, len(data))
	}
	if info.ModTime.Before(before) || info.ModTime.After(after) {
		t.Errorf("Stat ModTime = %v, want between %v and %v", info.ModTime, before, after)
	}
	infos := listInfos(t, s, "")
	if len(infos) != 1 || infos[0].Key != "a/b/c" || infos[0].Size != int64(len(data)) {
		t.Errorf("List = %+v, want one a/b/c of %d bytes", infos, len(data))
	}
	if err := s.Delete(ctx, "a/b/c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantNotFound(t, s, "a/b/c")
	wantEmpty(t, s)
	// The key is usable again after a delete, as are its former parents.
	mustPut(t, s, "a/b", []byte("x"))
	if got := mustGet(t, s, "a/b"); string(got) != "x" {
		t.Errorf("Get(a/b) after delete of a/b/c = %q, want x", got)
	}
}

func testOverwrite(t *testing.T, s blob.Store) {
	mustPut(t, s, "k", []byte("first version, longer"))
	mustPut(t, s, "k", []byte("second"))
	if got := mustGet(t, s, "k"); string(got) != "second" {
		t.Errorf("Get = %q, want second", got)
	}
	info, err := s.Stat(context.Background(), "k")
	if err != nil || info.Size != 6 {
		t.Errorf("Stat = %+v, %v; want size 6", info, err)
	}
	if keys := listKeys(t, s, ""); len(keys) != 1 {
		t.Errorf("List = %q, want just k", keys)
	}
}

func testEmpty(t *testing.T, s blob.Store) {
	ctx := context.Background()
	if err := s.Put(ctx, "empty/known", strings.NewReader(""), 0); err != nil {
		t.Fatalf("Put size 0: %v", err)
	}
	if err := s.Put(ctx, "empty/streamed", &plainReader{strings.NewReader("")}, -1); err != nil {
		t.Fatalf("Put size -1: %v", err)
	}
	for _, key := range []string{"empty/known", "empty/streamed"} {
		if got := mustGet(t, s, key); len(got) != 0 {
			t.Errorf("Get(%q) = %d bytes, want 0", key, len(got))
		}
		if info, err := s.Stat(ctx, key); err != nil || info.Size != 0 {
			t.Errorf("Stat(%q) = %+v, %v; want size 0", key, info, err)
		}
	}
	infos := listInfos(t, s, "empty/")
	if len(infos) != 2 || infos[0].Size != 0 || infos[1].Size != 0 {
		t.Errorf("List = %+v, want two empty objects", infos)
	}
}

// testExactSize: Put stores exactly size bytes even if r has more.
func testExactSize(t *testing.T, s blob.Store) {
	r := &plainReader{strings.NewReader("0123456789")}
	if err := s.Put(context.Background(), "k", r, 4); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := mustGet(t, s, "k"); string(got) != "0123" {
		t.Errorf("Get = %q, want 0123", got)
	}
}

func testLarge(t *testing.T, s blob.Store) {
	const n = 20 * mib
	ctx := context.Background()
	for i, size := range []int64{n, -1} {
		key := "large/" + []string{"known", "streamed"}[i]
		if err := s.Put(ctx, key, stream(uint64(i+1), n), size); err != nil {
			t.Fatalf("Put(%q, size %d): %v", key, size, err)
		}
		sum, got := getSum(t, s, key)
		if got != n || sum != streamSum(t, uint64(i+1), n) {
			t.Errorf("Get(%q) = %d bytes (sum match %v), want %d identical bytes",
				key, got, sum == streamSum(t, uint64(i+1), n), n)
		}
		if info, err := s.Stat(ctx, key); err != nil || info.Size != n {
			t.Errorf("Stat(%q) = %+v, %v; want size %d", key, info, err, n)
		}
	}
}

// testLongKey: the longest valid key (1024 bytes, 5 segments of 204) and
// a 255-byte segment work.
func testLongKey(t *testing.T, s blob.Store) {
	seg := strings.Repeat("x", 204)
	long := strings.Join([]string{seg, seg, seg, seg, seg}, "/")
	if len(long) != 1024 {
		t.Fatalf("test key is %d bytes", len(long))
	}
	wide := "w/" + strings.Repeat("y", 255)
	for _, key := range []string{long, wide} {
		mustPut(t, s, key, []byte("v"))
		if got := mustGet(t, s, key); string(got) != "v" {
			t.Errorf("Get(%d-byte key) = %q", len(key), got)
		}
	}
	if keys := listKeys(t, s, ""); len(keys) != 2 || keys[0] != wide || keys[1] != long {
		t.Errorf("List = %d keys, want the two long ones", len(keys))
	}
}

func testNotFound(t *testing.T, s blob.Store) {
	wantNotFound(t, s, "missing")
	wantNotFound(t, s, "missing/deeper")
	// A key with objects under it is not an object itself.
	mustPut(t, s, "d/x", []byte("x"))
	wantNotFound(t, s, "d")
	// Nor is a key under an object.
	wantNotFound(t, s, "d/x/y")
	if err := s.Delete(context.Background(), "d"); err != nil {
		t.Errorf("Delete(d) = %v, want nil", err)
	}
	if got := mustGet(t, s, "d/x"); string(got) != "x" {
		t.Errorf("Get(d/x) after Delete(d) = %q, want x", got)
	}
}

func testDeleteMissing(t *testing.T, s blob.Store) {
	ctx := context.Background()
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	mustPut(t, s, "k", []byte("v"))
	for i := range 2 {
		if err := s.Delete(ctx, "k"); err != nil {
			t.Errorf("Delete #%d = %v, want nil", i+1, err)
		}
	}
	wantNotFound(t, s, "k")
}

// testPrefixKeyConflict: "p" and "p/q" may not both be storable (the
// contract allows filesystem-backed stores to refuse), but a refused Put
// changes nothing and an accepted one keeps both.
func testPrefixKeyConflict(t *testing.T, s blob.Store) {
	check := func(first, second string) {
		mustPut(t, s, first, []byte("first"))
		err := s.Put(context.Background(), second, strings.NewReader("second"), 6)
		if got := mustGet(t, s, first); string(got) != "first" {
			t.Errorf("after Put(%q): Get(%q) = %q, want first", second, first, got)
		}
		if err != nil {
			if errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("Put(%q) = %v: a valid key is not ErrInvalidKey", second, err)
			}
			wantNotFound(t, s, second)
			return
		}
		if got := mustGet(t, s, second); string(got) != "second" {
			t.Errorf("Get(%q) = %q, want second", second, got)
		}
	}
	check("p", "p/q")
	check("r/s", "r")
}
