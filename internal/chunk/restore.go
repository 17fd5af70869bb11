package chunk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/engrams/engrams/internal/blob"
)

// unique is one distinct chunk of a manifest and every position it fills.
type unique struct {
	hash string
	ref  Ref // how it is stored
	n    int64
	idxs []int
}

// uniques lists the distinct non-zero chunks of m in first-use order.
func uniques(m Manifest) []unique {
	type key struct {
		h string
		n int64
	}
	pos := make(map[key]int)
	var out []unique
	for i, r := range m.Chunks {
		if r.IsZero() {
			continue
		}
		k := key{r.Hash, m.ChunkLen(i)}
		if j, ok := pos[k]; ok {
			out[j].idxs = append(out[j].idxs, i)
			continue
		}
		pos[k] = len(out)
		out = append(out, unique{hash: r.Hash, ref: r, n: k.n, idxs: []int{i}})
	}
	return out
}

// fetchBufs are one worker's buffers for fetching chunks of one manifest
// (aux: a delta's rebuilt chunk, allocated when first needed).
type fetchBufs struct{ obj, data, aux []byte }

// eachUnique runs fn over the distinct chunks of m with Parallel workers,
// each owning one pair of buffers; the first error stops the rest.
func (s *Store) eachUnique(ctx context.Context, m Manifest, withBufs bool,
	fn func(ctx context.Context, i int, u unique, b *fetchBufs) error) error {
	us := uniques(m)
	var objs, datas *bufPool
	if withBufs {
		objs = s.newBufPool(int(maxObjectLen(m.ChunkSize))+1, s.cfg.Parallel) // +1 detects oversized objects
		datas = s.newBufPool(int(m.ChunkSize), s.cfg.Parallel)
		defer objs.release()
		defer datas.release()
	}
	g, gctx := errgroup.WithContext(ctx)
	work := make(chan int)
	for range min(s.cfg.Parallel, len(us)) {
		g.Go(func() error {
			var b fetchBufs
			if withBufs {
				var err error
				if b.obj, err = objs.get(gctx); err != nil {
					return err
				}
				defer func() { objs.put(b.obj) }()
				if b.data, err = datas.get(gctx); err != nil {
					return err
				}
				defer func() { datas.put(b.data) }()
			}
			for i := range work {
				u := us[i]
				if err := fn(gctx, i, u, &b); err != nil {
					return &ChunkError{Index: u.idxs[0], Hash: u.hash, Err: err}
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(work)
		for i := range us {
			select {
			case work <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	return g.Wait()
}

// fetch returns the verified bytes of chunk h (n bytes long), from the cache
// if it has a good copy, else from the blob store (then caching the object).
func (s *Store) fetch(ctx context.Context, h string, n int64, b *fetchBufs) ([]byte, error) {
	if data, ok := s.cached(h, n, b); ok {
		return data, nil
	}
	obj, err := s.download(ctx, h, n, b.obj)
	if err != nil {
		return nil, err
	}
	b.obj = obj[:cap(obj)]
	data, err := s.codec.decode(obj, b.data, n, h)
	if err != nil {
		return nil, err
	}
	if s.cache != nil {
		if err := s.cache.Put(h, obj); err != nil {
			s.log.Warn("chunk cache put failed", "hash", h, "err", err)
		}
	}
	return data, nil
}

// cached returns the verified bytes of chunk h from the cache, if it holds
// a good copy; a bad one is dropped.
func (s *Store) cached(h string, n int64, b *fetchBufs) ([]byte, bool) {
	if s.cache == nil {
		return nil, false
	}
	obj, ok, err := s.cache.Get(h, b.obj)
	if err != nil {
		s.log.Warn("chunk cache read failed, fetching from blob store", "hash", h, "err", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	b.obj = obj[:cap(obj)]
	data, err := s.codec.decode(obj, b.data, n, h)
	if err != nil {
		s.log.Warn("chunk cache copy failed verification, fetching from blob store", "hash", h, "err", err)
		s.cache.Remove(h)
		return nil, false
	}
	return data, true
}

// download reads the blob object of h into buf, refusing impossible sizes.
func (s *Store) download(ctx context.Context, h string, n int64, buf []byte) ([]byte, error) {
	rc, err := s.blob.Get(ctx, s.Key(h))
	if errors.Is(err, blob.ErrNotFound) {
		s.forget(h)
		return nil, ErrMissing
	}
	if err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	defer rc.Close()
	limit := maxObjectLen(n)
	if int64(cap(buf)) < limit+1 {
		buf = make([]byte, limit+1)
	}
	buf = buf[:limit+1]
	got, err := io.ReadFull(rc, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
	case err != nil:
		return nil, fmt.Errorf("get: read: %w", err)
	default:
		return nil, fmt.Errorf("%w: object larger than %d bytes", ErrCorrupt, limit)
	}
	return buf[:got], nil
}

// Restore writes the file m describes to dst. Every chunk is verified
// against its hash before it is written; zero chunks stay holes. The file is
// built beside dst under a temporary name and renamed into place only when
// complete and synced, so on any error (ErrCorrupt, ErrMissing, ...) dst is
// untouched.
func (s *Store) Restore(ctx context.Context, m Manifest, dst string) error {
	if err := s.restore(ctx, m, dst); err != nil {
		return fmt.Errorf("restore %s: %w", dst, err)
	}
	return nil
}

func (s *Store) restore(ctx context.Context, m Manifest, dst string) (err error) {
	if err := m.Validate(); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".restore-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Truncate(m.Size); err != nil { // zero chunks stay holes
		return err
	}
	err = s.eachUnique(ctx, m, true, func(ctx context.Context, _ int, u unique, b *fetchBufs) error {
		data, err := s.fetchRef(ctx, u.ref, u.n, b)
		if err != nil {
			return err
		}
		for _, i := range u.idxs {
			if _, err := f.WriteAt(data, int64(i)*m.ChunkSize); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dst))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Verify checks, without reading chunk data, that every chunk m names is in
// the cache or the blob store with a plausible size. It reports every
// unavailable chunk (up to 8 named) in one error wrapping ErrMissing and/or
// ErrCorrupt. Run it before starting a VMM on a restored snapshot.
func (s *Store) Verify(ctx context.Context, m Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("verify manifest: %w", err)
	}
	var mu sync.Mutex
	var bad []error
	err := s.eachUnique(ctx, m, false, func(ctx context.Context, _ int, u unique, _ *fetchBufs) error {
		if s.cache != nil && s.cache.Has(u.hash) {
			return nil
		}
		for _, o := range u.ref.Objects() {
			err := s.statObject(ctx, o, u.n)
			if errors.Is(err, ErrMissing) || errors.Is(err, ErrCorrupt) {
				mu.Lock()
				bad = append(bad, &ChunkError{Index: u.idxs[0], Hash: o, Err: err})
				mu.Unlock()
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify manifest: %w", err)
	}
	return badChunks("verify manifest", len(m.Chunks), bad)
}

// badChunks folds per-chunk failures into one error naming the first few.
func badChunks(action string, total int, bad []error) error {
	if len(bad) == 0 {
		return nil
	}
	named := bad[:min(len(bad), 8)]
	return fmt.Errorf("%s: %d of %d chunks unavailable: %w", action, len(bad), total, errors.Join(named...))
}

// statObject checks that the blob store holds a plausibly sized object for h.
func (s *Store) statObject(ctx context.Context, h string, n int64) error {
	info, err := s.blob.Stat(ctx, s.Key(h))
	switch {
	case errors.Is(err, blob.ErrNotFound):
		return ErrMissing
	case err != nil:
		return fmt.Errorf("stat: %w", err)
	case info.Size < 1 || info.Size > maxObjectLen(n):
		return fmt.Errorf("%w: object is %d bytes, chunk is %d", ErrCorrupt, info.Size, n)
	}
	s.markKnown(h, info.ModTime) // a capture keeping it unread need not ask again
	return nil
}

// VerifyData fetches (through the cache, filling it) and hashes every chunk
// of m without writing anything; the first bad chunk fails it.
func (s *Store) VerifyData(ctx context.Context, m Manifest) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("verify manifest data: %w", err)
	}
	err := s.eachUnique(ctx, m, true, func(ctx context.Context, _ int, u unique, b *fetchBufs) error {
		_, err := s.fetchRef(ctx, u.ref, u.n, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("verify manifest data: %w", err)
	}
	return nil
}

// Prefetch fills the cache with every chunk of m it lacks, verified.
func (s *Store) Prefetch(ctx context.Context, m Manifest) error {
	if s.cache == nil {
		return fmt.Errorf("prefetch: the store has no cache")
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	err := s.eachUnique(ctx, m, true, func(ctx context.Context, _ int, u unique, b *fetchBufs) error {
		if s.cache.Has(u.hash) {
			return nil
		}
		_, err := s.fetchRef(ctx, u.ref, u.n, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	return nil
}

// Missing lists (once each, in manifest order, as Refs of their hash) the
// objects the chunks of m need (a delta needs its base and its delta) that
// the blob store lacks or holds with an impossible size. It asks the blob store
// itself, not the cache or the in-process "known" set: use it before
// committing a snapshot.
func (s *Store) Missing(ctx context.Context, m Manifest) ([]Ref, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("list missing chunks: %w", err)
	}
	us := uniques(m)
	missing := make([][]string, len(us))
	err := s.eachUnique(ctx, m, false, func(ctx context.Context, i int, u unique, _ *fetchBufs) error {
		for _, o := range u.ref.Objects() {
			err := s.statObject(ctx, o, u.n)
			if errors.Is(err, ErrMissing) || errors.Is(err, ErrCorrupt) {
				missing[i] = append(missing[i], o)
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list missing chunks: %w", err)
	}
	var out []Ref
	seen := map[string]bool{}
	for _, objs := range missing {
		for _, o := range objs {
			if !seen[o] {
				seen[o] = true
				out = append(out, Ref{Hash: o})
			}
		}
	}
	return out, nil
}
