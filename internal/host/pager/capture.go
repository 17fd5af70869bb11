package pager

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/engrams/engrams/internal/chunk"
)

// Sync makes the kernel write every page the guest dirtied back to the
// file, so Changed and the overlay are complete. Call it with the VM
// stopped: nothing dirties pages after it then. It fails for good once an
// overlay write failed.
func (f *File) Sync(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { // fsync cannot be cancelled; a stuck one is abandoned
		h, err := os.Open(f.path)
		if err == nil {
			err = h.Sync()
			_ = h.Close()
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("lazy memory %s: sync: %w", f.name, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.broken
}

// Manifest is the manifest the file started from or was last rebased on:
// the parent of its next capture.
func (f *File) Manifest() chunk.Manifest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.man
}

// Changed reports, as of now, whether chunk i was written since the last
// capture (a copy: later writes do not change it).
func (f *File) Changed() func(i int) bool {
	f.mu.Lock()
	d := slices.Clone(f.dirty)
	f.mu.Unlock()
	return func(i int) bool { return i >= 0 && i < len(d) && d[i] }
}

// Overlay reads the file's local chunks: every chunk Changed reports is
// there.
func (f *File) Overlay() io.ReaderAt { return f.overlay }

// Touched lists the chunks the guest touched since the file was added,
// in first-touch order: the working set its next snapshot records.
func (f *File) Touched() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.touched)
}

// Rebase makes m, a capture of this file, the parent of the next one:
// nothing is dirty since it. Call it before the VM runs again.
func (f *File) Rebase(m chunk.Manifest) error {
	if m.Size != f.size || m.ChunkSize != f.cs {
		return fmt.Errorf("lazy memory %s: rebase on a manifest of %d bytes in %d-byte chunks, the file has %d in %d",
			f.name, m.Size, m.ChunkSize, f.size, f.cs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.man = m
	clear(f.dirty)
	return nil
}

// Prefetch fetches every non-zero chunk not yet local: the chunks of order
// first, in that order, then the rest in address order, parallel at a
// time. Chunks the guest faults on meanwhile are fetched at once, beside
// the prefetch. A chunk that fails is left to a later demand; the first
// such error is returned after the rest were tried.
func (f *File) Prefetch(ctx context.Context, order []int, parallel int) error {
	f.mu.Lock()
	n := len(f.man.Chunks)
	queued := make([]bool, n)
	var all []int
	add := func(i int) {
		if i >= 0 && i < n && !queued[i] && f.state[i] != present {
			queued[i] = true
			all = append(all, i)
		}
	}
	for _, i := range order {
		add(i)
	}
	for i := range n {
		add(i)
	}
	f.mu.Unlock()
	next := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	var first error
	errs := make(chan error, 1)
	for range max(parallel, 1) {
		g.Go(func() error {
			for i := range next {
				if err := f.ensure(i, false); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(next)
		for _, i := range all {
			select {
			case next <- i:
			case <-gctx.Done():
				return gctx.Err()
			case <-f.ctx.Done():
				return f.ctx.Err()
			}
		}
		return nil
	})
	err := g.Wait()
	select {
	case first = <-errs:
	default:
	}
	if err != nil {
		return err
	}
	return first
}
