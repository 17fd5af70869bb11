package chunk

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/blob"
)

// Config tunes a Store. Zero values take the documented defaults.
type Config struct {
	// ChunkSize for files this Store writes (default DefaultChunkSize; use
	// MemoryChunkSize for guest memory). Restore and Verify read any manifest,
	// whatever its chunk size.
	ChunkSize int64
	// Compression is CompressionNone (default) or CompressionZstd.
	Compression string
	// Parallel is how many chunks are hashed, uploaded or fetched at once
	// (default 8). Memory use of one call is about 2 × (Parallel+1) × ChunkSize.
	Parallel int
	// KeyPrefix is the blob folder for chunk objects (default "chunks"). The
	// object of a chunk with hex hash h is KeyPrefix/h[:2]/h; the two-hex-digit
	// fan-out keeps local-directory listings and S3 prefixes small.
	KeyPrefix string
	// RefreshAfter: an object found already present is reused only if its
	// ModTime is newer than this (default 12h); an older one is re-put, which
	// renews its ModTime. Sweep deletes only objects older than its grace
	// cut-off, so a chunk a not-yet-committed manifest reuses cannot be swept
	// as long as the sweep grace exceeds RefreshAfter plus the longest
	// upload-to-commit time (run Sweep with olderThan = now − 24h or more).
	RefreshAfter time.Duration
	// BlindPut: a chunk this Store does not know as stored and the cache
	// does not hold (this host never saw it) is put without asking the blob
	// store first. For small chunks (guest memory's) the question costs a
	// round trip like the put itself, and a chunk no one on this host has
	// seen is most often new; a put of one that was there rewrites the
	// same bytes (content-addressed) and renews its ModTime, as a refresh
	// does.
	BlindPut bool
	// KnownMax bounds the in-process "known present" set (default 1<<18
	// hashes, about 1 TiB of 4 MiB chunks); when full it is cleared.
	KnownMax int
}

// Deps are a Store's collaborators.
type Deps struct {
	Blob   blob.Store
	Cache  *Cache // optional per-host chunk cache
	Logger *slog.Logger
	Now    func() time.Time // default time.Now
}

// Defaults for Config.
const (
	DefaultParallel     = 8
	DefaultKeyPrefix    = "chunks"
	DefaultRefreshAfter = 12 * time.Hour
	DefaultKnownMax     = 1 << 18
)

// Store writes files into and reads them out of a blob store as chunks.
// It is safe for concurrent use. Close releases the codec.
type Store struct {
	cfg   Config
	blob  blob.Store
	cache *Cache
	log   *slog.Logger
	now   func() time.Time
	codec *codec

	knownMu sync.Mutex
	known   map[string]time.Time // hash -> object ModTime (as written or stat'ed)

	poolsMu sync.Mutex
	pools   map[int]*sync.Pool // buffer size -> free buffers

	readPool sync.Pool // *fetchBufs of ReadChunk
}

// New validates cfg and builds a Store.
func New(cfg Config, deps Deps) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new chunk store: %w", err)
	}
	if deps.Blob == nil {
		return nil, fmt.Errorf("new chunk store: Deps.Blob is required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	c, err := newCodec(cfg.Compression, cfg.Parallel)
	if err != nil {
		return nil, fmt.Errorf("new chunk store: %w", err)
	}
	return &Store{
		cfg: cfg, blob: deps.Blob, cache: deps.Cache, log: deps.Logger, now: deps.Now, codec: c,
		known: make(map[string]time.Time), pools: make(map[int]*sync.Pool),
	}, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize || c.ChunkSize%MinChunkSize != 0 {
		return c, fmt.Errorf("chunk size %d: want a multiple of %d in [%d, %d]",
			c.ChunkSize, MinChunkSize, MinChunkSize, MaxChunkSize)
	}
	if c.Compression == "" {
		c.Compression = CompressionNone
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.Parallel < 1 || c.Parallel > 256 {
		return c, fmt.Errorf("parallel %d: want 1..256", c.Parallel)
	}
	c.KeyPrefix = strings.Trim(c.KeyPrefix, "/")
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.RefreshAfter == 0 {
		c.RefreshAfter = DefaultRefreshAfter
	}
	if c.KnownMax == 0 {
		c.KnownMax = DefaultKnownMax
	}
	return c, nil
}

// Close releases the compression state. The Store must not be used after.
func (s *Store) Close() { s.codec.close() }

// ChunkSize is the chunk size this Store writes.
func (s *Store) ChunkSize() int64 { return s.cfg.ChunkSize }

// Key is the blob key of the chunk with hex hash h.
func (s *Store) Key(h string) string { return ChunkKey(s.cfg.KeyPrefix, h) }

// ChunkKey is the blob key of the chunk with hex hash h under prefix.
func ChunkKey(prefix, h string) string {
	return trimSlashes(prefix) + "/" + h[:2] + "/" + h
}

func trimSlashes(s string) string { return strings.Trim(s, "/") }

// hashFromKey returns the hash a chunk key under prefix names, if it is one.
func hashFromKey(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefixDir(prefix))
	if !ok || len(rest) != 67 || rest[2] != '/' {
		return "", false
	}
	h := rest[3:]
	if !validHash(h) || rest[:2] != h[:2] {
		return "", false
	}
	return h, true
}

// knownFresh reports whether this process saw the object recently enough to
// skip Stat and upload.
func (s *Store) knownFresh(h string) bool {
	s.knownMu.Lock()
	t, ok := s.known[h]
	s.knownMu.Unlock()
	return ok && s.now().Sub(t) < s.cfg.RefreshAfter
}

// markKnown records that the object for h exists with the given ModTime.
func (s *Store) markKnown(h string, modTime time.Time) {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if len(s.known) >= s.cfg.KnownMax {
		clear(s.known)
	}
	s.known[h] = modTime
}

// forget drops h from the known set (after a read found it missing).
func (s *Store) forget(h string) {
	s.knownMu.Lock()
	delete(s.known, h)
	s.knownMu.Unlock()
}

// bufPool hands out at most n buffers of one size, recycling them through the
// Store's shared free list: it bounds one call's memory.
type bufPool struct {
	size int
	free chan []byte
	sem  chan struct{}
	src  *sync.Pool
}

func (s *Store) newBufPool(size, n int) *bufPool {
	s.poolsMu.Lock()
	p, ok := s.pools[size]
	if !ok {
		p = &sync.Pool{}
		s.pools[size] = p
	}
	s.poolsMu.Unlock()
	return &bufPool{size: size, free: make(chan []byte, n), sem: make(chan struct{}, n), src: p}
}

func (p *bufPool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return b, nil
	default:
	}
	select {
	case b := <-p.free:
		return b, nil
	case p.sem <- struct{}{}:
		if b, ok := p.src.Get().(*[]byte); ok {
			return *b, nil
		}
		return make([]byte, p.size), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *bufPool) put(b []byte) { p.free <- b[:cap(b)] }

// release returns every idle buffer to the Store's shared free list.
func (p *bufPool) release() {
	for {
		select {
		case b := <-p.free:
			p.src.Put(&b)
		default:
			return
		}
	}
}
