package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/blob"
)

func testConcurrentDistinct(t *testing.T, s blob.Store) {
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("c/%02d", i)
			data := uniform(byte(i), 64*1024+i)
			if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Put: %v", err)
	}
	keys := listKeys(t, s, "c/")
	if len(keys) != n {
		t.Fatalf("List = %d keys, want %d", len(keys), n)
	}
	for i := range n {
		got := mustGet(t, s, fmt.Sprintf("c/%02d", i))
		if !bytes.Equal(got, uniform(byte(i), 64*1024+i)) {
			t.Errorf("c/%02d: wrong content (%d bytes)", i, len(got))
		}
	}
}

// checkWhole reports whether b is one writer's whole version: writer w
// writes uniform(w, versionLen(w)).
func checkWhole(b []byte) error {
	if len(b) == 0 {
		return errors.New("empty read")
	}
	w := b[0]
	if len(b) != versionLen(w) || !bytes.Equal(b, uniform(w, len(b))) {
		return fmt.Errorf("torn read: %d bytes starting with writer %d", len(b), w)
	}
	return nil
}

func versionLen(w byte) int { return 256*1024 + int(w)*4099 }

// testConcurrentSameKey: writers race on one key while readers read it;
// every read and the final object are one writer's whole version.
func testConcurrentSameKey(t *testing.T, s blob.Store) {
	const writers, rounds = 8, 3
	mustPut(t, s, "same", uniform(0, versionLen(0)))
	ctx, cancel := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	readErrs := make(chan error, 4)
	for range 4 {
		readers.Go(func() { readErrs <- readUntil(ctx, s, "same") })
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := 1; w <= writers; w++ {
		wg.Go(func() {
			data := uniform(byte(w), versionLen(byte(w)))
			for range rounds {
				if err := s.Put(context.Background(), "same", bytes.NewReader(data), int64(len(data))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	cancel()
	readers.Wait()
	close(errs)
	close(readErrs)
	for err := range errs {
		t.Errorf("concurrent Put: %v", err)
	}
	for err := range readErrs {
		if err != nil {
			t.Errorf("reader during concurrent Puts: %v", err)
		}
	}
	if err := checkWhole(mustGet(t, s, "same")); err != nil {
		t.Errorf("final object: %v", err)
	}
	if keys := listKeys(t, s, ""); len(keys) != 1 || keys[0] != "same" {
		t.Errorf("List = %q, want just same", keys)
	}
}

// readUntil reads key repeatedly until ctx is done; every read must be
// whole.
func readUntil(ctx context.Context, s blob.Store, key string) error {
	for ctx.Err() == nil {
		rc, err := s.Get(context.Background(), key)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if err := checkWhole(b); err != nil {
			return err
		}
	}
	return nil
}
