package blobtest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

// testCancelledContext: every method fails with the context's error on a
// done context and changes nothing.
func testCancelledContext(t *testing.T, s blob.Store) {
	mustPut(t, s, "keep", []byte("v"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, "new", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put = %v, want context.Canceled", err)
	}
	if err := s.Put(ctx, "new", &plainReader{strings.NewReader("x")}, -1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put(size -1) = %v, want context.Canceled", err)
	}
	if rc, err := s.Get(ctx, "keep"); !errors.Is(err, context.Canceled) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Get = %v, want context.Canceled", err)
	}
	if _, err := s.Stat(ctx, "keep"); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat = %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, "keep"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete = %v, want context.Canceled", err)
	}
	called := false
	err := s.List(ctx, "", func(blob.Info) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("List = %v (callback called: %v), want context.Canceled and no calls", err, called)
	}
	wantNotFound(t, s, "new")
	if got := mustGet(t, s, "keep"); string(got) != "v" {
		t.Errorf("Get(keep) = %q after cancelled calls", got)
	}
}

// testCancelMidPut: cancelling while the body streams aborts the Put with
// the context's error and leaves no object.
func testCancelMidPut(t *testing.T, s blob.Store) {
	for _, tc := range []struct {
		key       string
		total, at int64
		knownSize bool
	}{
		{"small-known", 64 * 1024, 1000, true},
		{"small-streamed", 64 * 1024, 1000, false},
		{"large-known", 16 * mib, 7 * mib, true},
		{"large-streamed", 16 * mib, 7 * mib, false},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		size := int64(-1)
		if tc.knownSize {
			size = tc.total
		}
		r := &hookAfter{r: stream(9, tc.total), left: tc.at, hook: cancel}
		err := s.Put(ctx, tc.key, r, size)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Put(%s) cancelled midway = %v, want context.Canceled", tc.key, err)
		}
		wantNotFound(t, s, tc.key)
	}
	wantEmpty(t, s)
}

// testCancelMidGet: the reader from Get fails once its context is done.
func testCancelMidGet(t *testing.T, s blob.Store) {
	const n = 8 * mib
	if err := s.Put(context.Background(), "big", stream(5, n), n); err != nil {
		t.Fatalf("Put: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := s.Get(ctx, "big")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1024)); err != nil {
		t.Fatalf("first read: %v", err)
	}
	cancel()
	got, err := io.Copy(io.Discard, rc)
	if err == nil {
		t.Errorf("read after cancel: got the remaining %d bytes and no error", got)
	}
}
