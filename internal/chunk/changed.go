package chunk

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/engrams/engrams/internal/blob"
)

// keeper is a source that knows some chunks equal its parent's unread,
// and reads one again when its ref must be stored anew.
type keeper interface {
	kept(idx int) (Ref, bool)
	reread(idx int, off int64, buf []byte) (int, error)
}

// changedSource reads only the chunks a caller says changed since parent;
// the others keep the parent's refs without a read, while the blob store
// holds them fresh (else fill makes them readable and they are stored
// again, as a refresh).
type changedSource struct {
	r       io.ReaderAt
	parent  Manifest
	changed func(idx int) bool
	fill    func(idx int) error
}

// reread reads chunk idx (at off) after fill made it readable: a kept
// ref the store no longer holds fresh.
func (c *changedSource) reread(idx int, off int64, buf []byte) (int, error) {
	if err := c.fill(idx); err != nil {
		return 0, err
	}
	return c.read(off, buf)
}

func (c *changedSource) kept(idx int) (Ref, bool) {
	if idx >= len(c.parent.Chunks) || c.changed(idx) {
		return Ref{}, false
	}
	return c.parent.Chunks[idx], true
}

func (c *changedSource) hole(_, _ int64) bool { return false }

func (c *changedSource) read(off int64, buf []byte) (int, error) {
	n, err := c.r.ReadAt(buf, off)
	if n == len(buf) {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// PutChanged stores a new version of the file parent describes, of the
// same size, whose chunks changed only where changed(i) says so: those are
// read from r (at i*ChunkSize) and stored as PutFileOver stores them
// (deltas over the parent's chunk where that pays); every other chunk
// keeps the parent's ref, unread, once the blob store is known to hold
// its objects fresh (as a put would check): a kept ref that is stale or
// missing there is made readable in r by fill(i), read and stored again.
// A lazily restored guest's memory, whose pager knows which chunks were
// written, is captured so.
func (s *Store) PutChanged(ctx context.Context, r io.ReaderAt, parent Manifest, changed func(idx int) bool, fill func(idx int) error) (Manifest, PutStats, error) {
	if err := parent.Validate(); err != nil {
		return Manifest{}, PutStats{}, fmt.Errorf("put changed chunks: parent: %w", err)
	}
	if parent.ChunkSize != s.cfg.ChunkSize {
		return Manifest{}, PutStats{}, fmt.Errorf("put changed chunks: parent has %d-byte chunks, this store makes %d", parent.ChunkSize, s.cfg.ChunkSize)
	}
	m, st, err := s.put(ctx, &changedSource{r: r, parent: parent, changed: changed, fill: fill}, parent.Size, true, &parent)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("put changed chunks: %w", err)
	}
	return m, st, nil
}

// ReadChunk fills dst with chunk idx of m, verified against its hash:
// from the cache, the blob store, or rebuilt from a delta. dst must hold
// m.ChunkLen(idx) bytes; a zero chunk is cleared. Safe for concurrent use.
func (s *Store) ReadChunk(ctx context.Context, m Manifest, idx int, dst []byte) error {
	if idx < 0 || idx >= len(m.Chunks) {
		return fmt.Errorf("read chunk %d: %w: the manifest has %d", idx, ErrInvalidManifest, len(m.Chunks))
	}
	n := m.ChunkLen(idx)
	if int64(len(dst)) < n {
		return fmt.Errorf("read chunk %d: buffer of %d bytes for %d", idx, len(dst), n)
	}
	r := m.Chunks[idx]
	if r.IsZero() {
		clear(dst[:n])
		return nil
	}
	b := s.readBufs(m.ChunkSize)
	defer s.readPool.Put(b)
	data, err := s.fetchRef(ctx, r, n, b)
	if err != nil {
		return &ChunkError{Index: idx, Hash: r.Hash, Err: err}
	}
	copy(dst, data[:n])
	return nil
}

// readBufs takes buffers for one ReadChunk from the pool.
func (s *Store) readBufs(cs int64) *fetchBufs {
	if b, ok := s.readPool.Get().(*fetchBufs); ok && int64(cap(b.data)) >= cs {
		return b
	}
	return &fetchBufs{obj: make([]byte, maxObjectLen(cs)+1), data: make([]byte, cs)}
}

// refFresh reports whether the blob store holds every object of r fresh:
// known so to this Store, or found so by a stat (then remembered). Unlike
// present it never answers from BlindPut: a kept ref must exist.
func (s *Store) refFresh(ctx context.Context, r Ref) (bool, error) {
	for _, o := range r.Objects() {
		if s.knownFresh(o) {
			continue
		}
		info, err := s.blob.Stat(ctx, s.Key(o))
		switch {
		case errors.Is(err, blob.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("stat: %w", err)
		case s.now().Sub(info.ModTime) >= s.cfg.RefreshAfter:
			return false, nil
		}
		s.markKnown(o, info.ModTime)
	}
	return true, nil
}
