package pager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/engrams/engrams/internal/chunk"
)

// Source reads one verified chunk of a manifest (chunk.Store does).
type Source interface {
	ReadChunk(ctx context.Context, m chunk.Manifest, idx int, dst []byte) error
}

// chunk states of a file.
const (
	absent   uint8 = iota // only in the store
	fetching              // being fetched; wait on its channel
	present               // in the overlay
)

// File is one lazily restored memory: the manifest it started from (or was
// last captured as), a sparse overlay holding every chunk fetched or
// written, and what the guest touched and wrote.
type File struct {
	name    string
	path    string // in the mount
	src     Source
	overlay *os.File
	size    int64
	cs      int64
	ctx     context.Context // fetches; cancelled when the file is removed
	cancel  context.CancelFunc

	mu       sync.Mutex
	man      chunk.Manifest
	state    []uint8
	wait     map[int]chan struct{} // fetching chunk -> closed when done
	err      map[int]error         // a failed fetch, kept for the next request
	kernel   []bool                // the kernel asked for the chunk (read or write)
	dirty    []bool                // written since the last capture
	touched  []int                 // chunks the kernel asked for, first-touch order
	demand   atomic.Int64          // chunks fetched because the guest waited on them
	prefetch atomic.Int64          // chunks fetched ahead
	bufs     sync.Pool
	broken   error // the first overlay write that failed: the overlay no longer holds what the guest wrote
}

// fetchTimeout bounds one chunk's fetch: a guest's fault waits on it.
const fetchTimeout = 2 * time.Minute

func newFile(ctx context.Context, name, path, overlay string, m chunk.Manifest, src Source) (*File, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("lazy memory %s: %w", name, err)
	}
	of, err := os.OpenFile(overlay, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lazy memory %s: create overlay: %w", name, err)
	}
	if err := of.Truncate(m.Size); err != nil {
		_ = of.Close()
		return nil, fmt.Errorf("lazy memory %s: size overlay: %w", name, err)
	}
	n := len(m.Chunks)
	f := &File{name: name, path: path, src: src, overlay: of, size: m.Size, cs: m.ChunkSize, man: m,
		state: make([]uint8, n), wait: map[int]chan struct{}{}, err: map[int]error{},
		kernel: make([]bool, n), dirty: make([]bool, n)}
	f.ctx, f.cancel = context.WithCancel(ctx)
	for i, r := range m.Chunks {
		if r.IsZero() { // the overlay's hole reads as zeros
			f.state[i] = present
		}
	}
	f.bufs.New = func() any { b := make([]byte, f.cs); return &b }
	return f, nil
}

// Path is the file in the mount: the VMM's guest RAM.
func (f *File) Path() string { return f.path }

// Size is the memory's size in bytes.
func (f *File) Size() int64 { return f.size }

// chunks returns the chunk indexes [off, off+n) covers, clamped to the file.
func (f *File) chunks(off, n int64) (first, last int) {
	end := min(off+n, f.size)
	if off >= end {
		return 0, -1
	}
	return int(off / f.cs), int((end - 1) / f.cs)
}

// ensure makes chunk i present in the overlay, fetching it (once, however
// many ask) if needed. demand says the guest waits on it.
func (f *File) ensure(i int, demand bool) error {
	for {
		f.mu.Lock()
		switch f.state[i] {
		case present:
			f.mu.Unlock()
			return nil
		case fetching:
			ch := f.wait[i]
			f.mu.Unlock()
			select {
			case <-ch:
			case <-f.ctx.Done():
				return f.ctx.Err()
			}
			continue
		}
		if err := f.err[i]; err != nil && !demand {
			f.mu.Unlock()
			return err
		}
		ch := make(chan struct{})
		f.state[i], f.wait[i] = fetching, ch
		man := f.man
		f.mu.Unlock()
		err := f.fetch(man, i)
		f.mu.Lock()
		delete(f.wait, i)
		if err != nil {
			f.state[i], f.err[i] = absent, err
		} else {
			f.state[i] = present
			delete(f.err, i)
		}
		f.mu.Unlock()
		close(ch)
		if err == nil {
			if demand {
				f.demand.Add(1)
			} else {
				f.prefetch.Add(1)
			}
		}
		return err
	}
}

// fetch reads chunk i of man from the source into the overlay.
func (f *File) fetch(man chunk.Manifest, i int) error {
	bp := f.bufs.Get().(*[]byte)
	defer f.bufs.Put(bp)
	n := man.ChunkLen(i)
	buf := (*bp)[:n]
	ctx, cancel := context.WithTimeout(f.ctx, fetchTimeout)
	defer cancel()
	if err := f.src.ReadChunk(ctx, man, i, buf); err != nil {
		return fmt.Errorf("lazy memory %s: chunk %d: %w", f.name, i, err)
	}
	if _, err := f.overlay.WriteAt(buf, int64(i)*f.cs); err != nil {
		return fmt.Errorf("lazy memory %s: write overlay: %w", f.name, err)
	}
	return nil
}

// kernelRange is a read or write of the kernel's (the guest's fault,
// readahead or writeback): every chunk it covers becomes present (those
// missing fetched at once, side by side: a readahead window spans up to
// 16), and is recorded touched.
func (f *File) kernelRange(off, n int64) error {
	first, last := f.chunks(off, n)
	if last > first {
		var g errgroup.Group
		for i := first; i <= last; i++ {
			g.Go(func() error { return f.ensure(i, true) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	for i := first; i <= last; i++ {
		if err := f.ensure(i, true); err != nil {
			return err
		}
		f.mu.Lock()
		if !f.kernel[i] {
			f.kernel[i] = true
			f.touched = append(f.touched, i)
		}
		f.mu.Unlock()
	}
	return nil
}

// read serves a kernel read into buf.
func (f *File) read(off int64, buf []byte) (int, error) {
	if off < 0 || off >= f.size {
		return 0, nil
	}
	buf = buf[:min(int64(len(buf)), f.size-off)]
	if err := f.kernelRange(off, int64(len(buf))); err != nil {
		return 0, err
	}
	n, err := f.overlay.ReadAt(buf, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// write serves a kernel write (writeback of guest memory): the chunks it
// covers are dirty once the overlay holds the bytes. A failed write
// breaks the file for good (the kernel dropped the page's dirtiness).
func (f *File) write(off int64, data []byte) (int, error) {
	if off < 0 || off+int64(len(data)) > f.size {
		return 0, fmt.Errorf("lazy memory %s: write of %d bytes at %d past its %d", f.name, len(data), off, f.size)
	}
	if err := f.kernelRange(off, int64(len(data))); err != nil {
		return 0, err
	}
	n, err := f.overlay.WriteAt(data, off)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.broken == nil {
			f.broken = fmt.Errorf("lazy memory %s: write overlay at %d: %w", f.name, off, err)
		}
		return n, err
	}
	first, last := f.chunks(off, int64(len(data)))
	for i := first; i <= last; i++ {
		f.dirty[i] = true
	}
	return n, nil
}

// Fill makes chunk i local (fetching it if needed), as a capture needs
// for a chunk it must store again; it is not counted as a touch.
func (f *File) Fill(i int) error {
	if i < 0 || i >= len(f.state) {
		return fmt.Errorf("lazy memory %s: no chunk %d", f.name, i)
	}
	return f.ensure(i, false)
}

// Stats is what a file has done since it was added.
type Stats struct {
	Chunks   int   // non-zero chunks of its manifest
	Local    int   // of those, in the overlay
	Demand   int64 // fetched while the guest waited
	Prefetch int64 // fetched ahead
	Touched  int   // chunks the guest touched
	Dirty    int   // chunks written since the last capture
}

// Stats reports the file's counts.
func (f *File) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stats{Demand: f.demand.Load(), Prefetch: f.prefetch.Load(), Touched: len(f.touched)}
	for i, r := range f.man.Chunks {
		if r.IsZero() {
			continue
		}
		st.Chunks++
		if f.state[i] == present {
			st.Local++
		}
	}
	for _, d := range f.dirty {
		if d {
			st.Dirty++
		}
	}
	return st
}
