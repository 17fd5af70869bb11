package chunk

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/engrams/engrams/internal/blob"
)

// PutStats describes one PutFile, PutReader or Scan.
type PutStats struct {
	Chunks        int64         // chunks in the manifest
	Zero          int64         // all-zero chunks (not stored), including Holes
	Holes         int64         // zero chunks skipped unread as sparse-file holes
	Present       int64         // non-zero chunks the blob store already had
	Uploaded      int64         // chunk objects written (including Refreshed and Deltas)
	Deltas        int64         // changed chunks stored as a delta over the parent's chunk
	Refreshed     int64         // present but stale objects re-put to renew ModTime
	Unchanged     int64         // chunks kept from the parent unread: not written since it (PutChanged)
	Bytes         int64         // file size
	UploadedBytes int64         // uncompressed bytes of the uploaded chunks
	StoredBytes   int64         // object bytes written (after compression)
	Duration      time.Duration // wall time of the call
}

// Add adds o's counts, bytes and duration to p.
func (p *PutStats) Add(o PutStats) {
	p.Chunks += o.Chunks
	p.Zero += o.Zero
	p.Holes += o.Holes
	p.Present += o.Present
	p.Uploaded += o.Uploaded
	p.Deltas += o.Deltas
	p.Refreshed += o.Refreshed
	p.Unchanged += o.Unchanged
	p.Bytes += o.Bytes
	p.UploadedBytes += o.UploadedBytes
	p.StoredBytes += o.StoredBytes
	p.Duration += o.Duration
}

// source yields a file's chunks.
type source interface {
	// hole reports whether [off, off+n) is known to be all zero without reading.
	hole(off, n int64) bool
	// read fills buf with the bytes at off; it returns fewer than len(buf)
	// only at the end of a stream of unknown size.
	read(off int64, buf []byte) (int, error)
}

// fileSource reads a regular file with pread, skipping holes via SEEK_DATA.
type fileSource struct {
	f        *os.File
	size     int64
	sparse   bool  // SEEK_DATA works here
	nextData int64 // cached result of the last SEEK_DATA
}

func newFileSource(f *os.File, size int64) *fileSource {
	fs := &fileSource{f: f, size: size}
	fs.nextData, fs.sparse = nextData(f, 0, size)
	return fs
}

func (fs *fileSource) hole(off, n int64) bool {
	if !fs.sparse {
		return false
	}
	if fs.nextData < off { // the cached answer is behind us: ask again
		next, ok := nextData(fs.f, off, fs.size)
		if !ok {
			fs.sparse = false
			return false
		}
		fs.nextData = next
	}
	return fs.nextData >= off+n
}

func (fs *fileSource) read(off int64, buf []byte) (int, error) {
	n, err := fs.f.ReadAt(buf, off)
	if n == len(buf) {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the file shrank while we read it
	}
	return n, err
}

// readerSource reads a stream in order.
type readerSource struct {
	r     io.Reader
	known bool // size known: a short read is an error
}

func (rs *readerSource) hole(_, _ int64) bool { return false }

func (rs *readerSource) read(_ int64, buf []byte) (int, error) {
	n, err := io.ReadFull(rs.r, buf)
	if !rs.known && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return n, nil
	}
	return n, err
}

// PutFile splits the regular file at path into chunks and uploads the ones
// the blob store lacks. Memory stays bounded (see Config.Parallel) whatever
// the file size; holes of sparse files are recorded as zero chunks unread.
func (s *Store) PutFile(ctx context.Context, path string) (Manifest, PutStats, error) {
	m, st, err := s.putFile(ctx, path, true, nil)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("put file %s: %w", path, err)
	}
	return m, st, nil
}

// PutFileOver is PutFile for a new version of the file parent describes
// (a guest's memory at its previous snapshot): a chunk that changed is
// stored as its XOR with the parent's chunk (its base, when that was a
// delta too, so chains never grow) when the cache holds that base and the
// delta, zero pages left out, is at most half a chunk. An idle guest
// rewrites a few pages of many chunks; this uploads about those pages.
func (s *Store) PutFileOver(ctx context.Context, path string, parent Manifest) (Manifest, PutStats, error) {
	var p *Manifest
	if parent.ChunkSize == s.cfg.ChunkSize && parent.Validate() == nil {
		p = &parent
	}
	m, st, err := s.putFile(ctx, path, true, p)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("put file %s over its parent: %w", path, err)
	}
	return m, st, nil
}

// Scan computes the manifest of the file at path (hashes, zero detection)
// without touching the blob store or the cache.
func (s *Store) Scan(ctx context.Context, path string) (Manifest, PutStats, error) {
	m, st, err := s.putFile(ctx, path, false, nil)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("scan file %s: %w", path, err)
	}
	return m, st, nil
}

func (s *Store) putFile(ctx context.Context, path string, upload bool, parent *Manifest) (Manifest, PutStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return Manifest{}, PutStats{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Manifest{}, PutStats{}, err
	}
	if !fi.Mode().IsRegular() {
		return Manifest{}, PutStats{}, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	return s.put(ctx, newFileSource(f, fi.Size()), fi.Size(), upload, parent)
}

// PutReader chunks and uploads size bytes read from r; size < 0 means read
// to EOF. A stream shorter than a known size is an error.
func (s *Store) PutReader(ctx context.Context, r io.Reader, size int64) (Manifest, PutStats, error) {
	m, st, err := s.put(ctx, &readerSource{r: r, known: size >= 0}, size, true, nil)
	if err != nil {
		return Manifest{}, st, fmt.Errorf("put stream: %w", err)
	}
	return m, st, nil
}

// job is one chunk travelling from the reader to a worker.
type job struct {
	idx  int
	buf  []byte // nil for a hole or a kept chunk
	n    int64
	hole bool
	kept *Ref // the parent's ref, reused unread (a keeper source's unchanged chunk)
}

// put runs the pipeline: this goroutine reads chunks into pooled buffers (so
// at most Parallel+1 are in flight), Parallel workers detect zeros, hash and
// upload what is missing.
func (s *Store) put(ctx context.Context, src source, size int64, upload bool, parent *Manifest) (Manifest, PutStats, error) {
	start := s.now()
	cs := s.cfg.ChunkSize
	pool := s.newBufPool(int(cs), s.cfg.Parallel+1)
	defer pool.release()
	objs := s.newBufPool(objBufLen(cs), s.cfg.Parallel)
	defer objs.release()
	var (
		mu    sync.Mutex
		refs  = make([]Ref, 0, NumChunks(max(size, 0), cs))
		total PutStats
	)
	setRef := func(i int, r Ref) {
		mu.Lock()
		defer mu.Unlock()
		for len(refs) <= i {
			refs = append(refs, Ref{})
		}
		refs[i] = r
	}
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan job)
	w := &putWorker{s: s, pool: pool, objs: objs, setRef: setRef, upload: upload, parent: parent,
		cpu: make(chan struct{}, runtime.GOMAXPROCS(0))}
	w.keeper, _ = src.(keeper)
	for range s.cfg.Parallel {
		g.Go(func() error {
			st, err := w.run(gctx, jobs)
			mu.Lock()
			total.Add(st)
			mu.Unlock()
			return err
		})
	}
	var read int64
	g.Go(func() error {
		defer close(jobs)
		var err error
		read, err = s.produce(gctx, src, size, pool, jobs)
		return err
	})
	if err := g.Wait(); err != nil {
		return Manifest{}, total, err
	}
	total.Bytes, total.Duration = read, s.now().Sub(start)
	m := Manifest{Version: ManifestVersion, ChunkSize: cs, Size: read, Chunks: refs[:len(refs):len(refs)]}
	if err := m.Validate(); err != nil {
		return Manifest{}, total, fmt.Errorf("internal error: %w", err)
	}
	s.log.Debug("chunk put", "size", read, "chunks", total.Chunks, "zero", total.Zero,
		"present", total.Present, "uploaded", total.Uploaded, "stored_bytes", total.StoredBytes,
		"duration", total.Duration)
	return m, total, nil
}

// produce reads the source chunk by chunk and hands the chunks to workers.
func (s *Store) produce(ctx context.Context, src source, size int64, pool *bufPool, jobs chan<- job) (int64, error) {
	cs := s.cfg.ChunkSize
	var off int64
	for i := 0; size < 0 || off < size; i++ {
		n := cs
		if size >= 0 {
			n = min(cs, size-off)
		}
		j := job{idx: i, n: n}
		if k, ok := src.(keeper); ok {
			if r, ok := k.kept(i); ok {
				j.kept = &r
			}
		}
		if j.kept == nil {
			j.hole = src.hole(off, n)
		}
		if !j.hole && j.kept == nil {
			buf, err := pool.get(ctx)
			if err != nil {
				return off, err
			}
			got, err := src.read(off, buf[:n])
			if err != nil {
				pool.put(buf)
				return off, fmt.Errorf("read at %d: %w", off, err)
			}
			if got == 0 && size < 0 {
				pool.put(buf)
				return off, nil
			}
			j.buf, j.n = buf, int64(got)
		}
		select {
		case jobs <- j:
		case <-ctx.Done():
			if j.buf != nil {
				pool.put(j.buf)
			}
			return off, ctx.Err()
		}
		off += j.n
		if j.n < cs {
			break
		}
	}
	return off, nil
}

// putWorker processes jobs; Parallel of them run per call. cpu bounds how
// many hash at once to GOMAXPROCS: more would only evict each other's
// buffers from the CPU caches while the rest wait on uploads.
type putWorker struct {
	s      *Store
	pool   *bufPool // chunk buffers, filled by the producer
	objs   *bufPool // encode buffers
	setRef func(int, Ref)
	upload bool
	parent *Manifest // nil: no deltas
	cpu    chan struct{}
	keeper keeper // the source, when it keeps chunks unread
}

// run processes jobs until the channel closes or one fails.
func (w *putWorker) run(ctx context.Context, jobs <-chan job) (PutStats, error) {
	var st PutStats
	var obj []byte // this worker's encode buffer, taken on first use
	var d deltaBufs
	defer func() {
		if obj != nil {
			w.objs.put(obj)
		}
	}()
	for j := range jobs {
		st.Chunks++
		if j.kept != nil {
			kept, err := w.keep(ctx, &j, &st)
			if err != nil {
				return st, &ChunkError{Index: j.idx, Hash: j.kept.Hash, Err: err}
			}
			if kept {
				continue
			}
		}
		if j.hole {
			st.Zero++
			st.Holes++
			w.setRef(j.idx, ZeroRef())
			continue
		}
		data := j.buf[:j.n]
		w.cpu <- struct{}{}
		zero := isZero(data)
		var sum [32]byte
		if !zero {
			sum = sha256.Sum256(data)
		}
		<-w.cpu
		if zero {
			st.Zero++
			w.setRef(j.idx, ZeroRef())
			w.pool.put(j.buf)
			continue
		}
		h := hashHex(sum)
		ref := Ref{Hash: h}
		var err error
		if w.upload && obj == nil {
			obj, err = w.objs.get(ctx)
		}
		if w.upload && err == nil {
			ref, obj, err = w.store(ctx, j.idx, h, data, obj, &d, &st)
		}
		w.pool.put(j.buf)
		if err != nil { // errgroup cancels the producer and the other workers
			return st, &ChunkError{Index: j.idx, Hash: h, Err: err}
		}
		w.setRef(j.idx, ref)
	}
	return st, nil
}

// keep settles a kept chunk: its parent's ref when the store holds it
// fresh (kept), else its bytes read again into j to be stored anew.
func (w *putWorker) keep(ctx context.Context, j *job, st *PutStats) (kept bool, err error) {
	fresh, err := w.s.refFresh(ctx, *j.kept)
	if err != nil {
		return false, err
	}
	if fresh {
		st.Unchanged++
		w.setRef(j.idx, *j.kept)
		return true, nil
	}
	buf, err := w.pool.get(ctx)
	if err != nil {
		return false, err
	}
	n, err := w.keeper.reread(j.idx, int64(j.idx)*w.s.cfg.ChunkSize, buf[:j.n])
	if err != nil {
		w.pool.put(buf)
		return false, fmt.Errorf("read again a chunk the store lacks fresh: %w", err)
	}
	j.buf, j.n, j.kept = buf, int64(n), nil
	return false, nil
}

// objBufLen is the encode buffer size for chunks of cs bytes: room for the
// format byte and zstd's worst-case expansion of incompressible data.
func objBufLen(cs int64) int { return int(cs + cs/64 + 4096) }

// ensure makes sure the blob store holds a fresh object for data (hash h),
// and that the cache (if any) holds it too. obj is a reusable encode buffer.
func (s *Store) ensure(ctx context.Context, h string, data, obj []byte, st *PutStats) ([]byte, error) {
	present, refresh, err := s.present(ctx, h, int64(len(data)))
	if err != nil {
		return obj, err
	}
	encoded := false
	if !present {
		obj = s.codec.encode(data, obj)
		encoded = true
		if err := s.blob.Put(ctx, s.Key(h), bytesReader(obj), int64(len(obj))); err != nil {
			return obj, fmt.Errorf("upload: %w", err)
		}
		s.markKnown(h, s.now())
		st.Uploaded++
		st.UploadedBytes += int64(len(data))
		st.StoredBytes += int64(len(obj))
		if refresh {
			st.Refreshed++
		}
	} else {
		st.Present++
	}
	if s.cache != nil && !s.cache.Has(h) {
		if !encoded {
			obj = s.codec.encode(data, obj)
		}
		if err := s.cache.Put(h, obj); err != nil {
			s.log.Warn("chunk cache put failed", "hash", h, "err", err)
		}
	}
	return obj, nil
}

// present reports whether a usable object for h exists; refresh is true when
// one exists but is too old to rely on (it must be re-put).
func (s *Store) present(ctx context.Context, h string, n int64) (present, refresh bool, err error) {
	if s.knownFresh(h) {
		return true, false, nil
	}
	if s.cfg.BlindPut && (s.cache == nil || !s.cache.Has(h)) {
		return false, false, nil
	}
	info, err := s.blob.Stat(ctx, s.Key(h))
	switch {
	case errors.Is(err, blob.ErrNotFound):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("stat: %w", err)
	case info.Size < 1 || info.Size > maxObjectLen(n):
		s.log.Warn("chunk object has an impossible size, replacing it", "hash", h, "size", info.Size)
		return false, false, nil
	case s.now().Sub(info.ModTime) >= s.cfg.RefreshAfter:
		return false, true, nil
	}
	s.markKnown(h, info.ModTime)
	return true, false, nil
}
