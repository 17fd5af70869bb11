package chunk

import (
	"context"
	"crypto/sha256"
	"fmt"
)

// deltaBufs are one worker's buffers for deltas: a base object, its
// decoded bytes, and the XOR of a chunk with them.
type deltaBufs struct{ obj, base, xor []byte }

func (d *deltaBufs) grow(n int64) {
	if int64(cap(d.base)) < n {
		d.obj = make([]byte, maxObjectLen(n)+1)
		d.base = make([]byte, n)
		d.xor = make([]byte, n)
	}
}

// store uploads chunk idx (hash h) as PutFileOver describes, or as a
// whole object, and returns its ref.
func (w *putWorker) store(ctx context.Context, idx int, h string, data, obj []byte, d *deltaBufs, st *PutStats) (Ref, []byte, error) {
	if p, ok := w.parentRef(idx, len(data)); ok && p.Hash == h && p.IsDelta() {
		if w.s.objectsFresh(ctx, p) { // unchanged since the parent: keep its objects
			st.Present++
			w.s.cachePut(h, data, obj)
			return p, obj, nil
		}
	} else if ok && p.Hash != h {
		r, stored, err := w.s.putDelta(ctx, h, p, data, obj, d, st)
		if err != nil || stored {
			return r, obj, err
		}
	}
	obj, err := w.s.ensure(ctx, h, data, obj, st)
	return Ref{Hash: h}, obj, err
}

// parentRef is chunk idx of the parent, if it has one of this length.
func (w *putWorker) parentRef(idx, n int) (Ref, bool) {
	p := w.parent
	if p == nil || idx >= len(p.Chunks) || p.ChunkLen(idx) != int64(n) || p.Chunks[idx].IsZero() {
		return Ref{}, false
	}
	return p.Chunks[idx], true
}

// objectsFresh reports whether the blob store holds fresh objects for r.
func (s *Store) objectsFresh(ctx context.Context, r Ref) bool {
	for _, o := range r.Objects() {
		if present, refresh, err := s.present(ctx, o, s.cfg.ChunkSize); err != nil || !present || refresh {
			return false
		}
	}
	return true
}

// putDelta stores data (hash h) as its XOR with the base of parent chunk p,
// when the cache holds that base, the blob store a fresh copy of it, and
// the delta is small. stored is false when it did not apply.
func (s *Store) putDelta(ctx context.Context, h string, p Ref, data, obj []byte, d *deltaBufs, st *PutStats) (r Ref, stored bool, err error) {
	base := p.Hash
	if p.IsDelta() {
		base = p.Base
	}
	if s.cache == nil || base == h || !s.cache.Has(base) {
		return Ref{}, false, nil
	}
	n := int64(len(data))
	d.grow(n)
	bobj, ok, err := s.cache.Get(base, d.obj)
	if err != nil || !ok {
		return Ref{}, false, nil // a cache problem only loses the saving
	}
	d.obj = bobj[:cap(bobj)]
	bdata, err := s.codec.decode(bobj, d.base, n, base)
	if err != nil {
		s.cache.Remove(base)
		return Ref{}, false, nil
	}
	x := d.xor[:n]
	for i := range x {
		x[i] = data[i] ^ bdata[i]
	}
	enc := s.codec.encode(x, obj)
	if int64(len(enc)) > n/2 || !s.objectsFresh(ctx, Ref{Hash: base}) {
		return Ref{}, false, nil
	}
	dh := hashHex(sha256.Sum256(x))
	present, _, err := s.present(ctx, dh, n)
	if err != nil {
		return Ref{}, false, err
	}
	if !present {
		if err := s.blob.Put(ctx, s.Key(dh), bytesReader(enc), int64(len(enc))); err != nil {
			return Ref{}, false, fmt.Errorf("upload delta: %w", err)
		}
		s.markKnown(dh, s.now())
		st.Uploaded++
		st.Deltas++
		st.UploadedBytes += n
		st.StoredBytes += int64(len(enc))
	} else {
		st.Present++
	}
	s.cachePut(h, data, obj)
	return Ref{Hash: h, Base: base, Delta: dh}, true, nil
}

// cachePut keeps data (hash h) in the cache, if there is one and it lacks it.
func (s *Store) cachePut(h string, data, obj []byte) {
	if s.cache == nil || s.cache.Has(h) {
		return
	}
	if err := s.cache.Put(h, s.codec.encode(data, obj)); err != nil {
		s.log.Warn("chunk cache put failed", "hash", h, "err", err)
	}
}

// fetchRef returns the verified bytes of chunk r (n bytes long): from the
// cache, or from its object, or rebuilt from its base and delta objects
// (then cached whole).
func (s *Store) fetchRef(ctx context.Context, r Ref, n int64, b *fetchBufs) ([]byte, error) {
	if !r.IsDelta() {
		return s.fetch(ctx, r.Hash, n, b)
	}
	if data, ok := s.cached(r.Hash, n, b); ok {
		return data, nil
	}
	base, err := s.fetch(ctx, r.Base, n, b)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", r.Base, err)
	}
	if int64(cap(b.aux)) < n {
		b.aux = make([]byte, n)
	}
	out := b.aux[:n]
	copy(out, base)
	obj, err := s.download(ctx, r.Delta, n, b.obj)
	if err != nil {
		return nil, fmt.Errorf("delta %s: %w", r.Delta, err)
	}
	b.obj = obj[:cap(obj)]
	x, err := s.codec.decode(obj, b.data, n, r.Delta)
	if err != nil {
		return nil, fmt.Errorf("delta %s: %w", r.Delta, err)
	}
	for i := range out {
		out[i] ^= x[i]
	}
	if got := hashHex(sha256.Sum256(out)); got != r.Hash {
		return nil, fmt.Errorf("%w: base XOR delta has sha256 %s", ErrCorrupt, got)
	}
	s.cachePut(r.Hash, out, b.obj)
	return out, nil
}
