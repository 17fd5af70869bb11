package chunk

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	Dir      string // created if absent; owned by the cache
	MaxBytes int64  // budget for stored objects; least recently used are evicted beyond it
}

// CacheDeps are a Cache's collaborators.
type CacheDeps struct {
	Logger *slog.Logger
	Now    func() time.Time // default time.Now; also stamps files' mtimes
	// Reads learns of every Get, hit or miss (a *metrics.Registry); nil:
	// only Stats counts them.
	Reads CacheReads
}

// CacheReads is told of each read of the cache.
type CacheReads interface {
	ChunkCacheRead(hit bool)
}

// CacheStats is a snapshot of a Cache's counters.
type CacheStats struct {
	Entries   int
	Bytes     int64
	MaxBytes  int64
	Hits      int64
	Misses    int64
	Puts      int64
	Evictions int64
}

// Cache is a per-host on-disk cache of chunk objects (the same encoded form
// as in the blob store, so readers verify cached data exactly like fetched
// data) with a byte budget and LRU eviction. Files live at Dir/h[:2]/h and
// are written to Dir/tmp then renamed, so a crash leaves whole files or none;
// it does not fsync (a torn file after a power loss fails verification and is
// refetched). A file's mtime is its last use, so the LRU order survives a
// restart: NewCache rebuilds the index from the directory. Safe for
// concurrent use, including by several Stores.
type Cache struct {
	dir string
	max int64
	log *slog.Logger
	now func() time.Time
	obs CacheReads // nil: none

	mu    sync.Mutex
	lru   *list.List               // front is most recently used; values are *cacheEntry
	idx   map[string]*list.Element // hash -> element
	stats CacheStats
}

type cacheEntry struct {
	hash string
	size int64
}

// NewCache opens (or creates) the cache directory and rebuilds the index
// from the files in it, evicting beyond the budget.
func NewCache(cfg CacheConfig, deps CacheDeps) (*Cache, error) {
	if cfg.Dir == "" || cfg.MaxBytes <= 0 {
		return nil, fmt.Errorf("open chunk cache: Dir and a positive MaxBytes are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	c := &Cache{dir: cfg.Dir, max: cfg.MaxBytes, log: deps.Logger, now: deps.Now, obs: deps.Reads,
		lru: list.New(), idx: make(map[string]*list.Element)}
	c.stats.MaxBytes = cfg.MaxBytes
	if err := os.RemoveAll(c.tmpDir()); err != nil { // leftovers of interrupted Puts
		return nil, fmt.Errorf("open chunk cache %s: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(c.tmpDir(), 0o700); err != nil {
		return nil, fmt.Errorf("open chunk cache %s: %w", cfg.Dir, err)
	}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("open chunk cache %s: %w", cfg.Dir, err)
	}
	c.mu.Lock()
	c.evictLocked("")
	c.mu.Unlock()
	return c, nil
}

func (c *Cache) tmpDir() string { return filepath.Join(c.dir, "tmp") }

func (c *Cache) path(h string) string { return filepath.Join(c.dir, h[:2], h) }

// load indexes Dir/xx/<hash> files, oldest mtime at the back of the LRU.
func (c *Cache) load() error {
	type found struct {
		e     cacheEntry
		mtime time.Time
	}
	var all []found
	err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == c.tmpDir() {
				return filepath.SkipDir
			}
			return nil
		}
		h := d.Name()
		if !validHash(h) || filepath.Base(filepath.Dir(p)) != h[:2] {
			c.log.Warn("chunk cache: ignoring foreign file", "path", p)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		all = append(all, found{cacheEntry{h, fi.Size()}, fi.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	for _, f := range all {
		e := f.e
		c.idx[e.hash] = c.lru.PushFront(&e)
		c.stats.Bytes += e.size
	}
	c.stats.Entries = len(c.idx)
	return nil
}

// Has reports whether the cache holds h (without counting as a use).
func (c *Cache) Has(h string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.idx[h]
	return ok
}

// Get reads the object for h into buf (grown if needed) and marks it most
// recently used. ok is false on a miss.
func (c *Cache) Get(h string, buf []byte) (obj []byte, ok bool, err error) {
	c.mu.Lock()
	el, ok := c.idx[h]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		c.read(false)
		return nil, false, nil
	}
	obj, err = readFileInto(c.path(h), buf)
	if errors.Is(err, fs.ErrNotExist) { // removed behind our back
		c.Remove(h)
		c.read(false)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("chunk cache get %s: %w", h, err)
	}
	now := c.now()
	if err := os.Chtimes(c.path(h), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("chunk cache get %s: mark used: %w", h, err)
	}
	c.read(true)
	return obj, true, nil
}

// read counts one Get's result and reports it.
func (c *Cache) read(hit bool) {
	c.count(func(s *CacheStats) {
		if hit {
			s.Hits++
		} else {
			s.Misses++
		}
	})
	if c.obs != nil {
		c.obs.ChunkCacheRead(hit)
	}
}

func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := int(fi.Size())
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Put stores obj as the object for h, unless it alone exceeds the budget,
// then evicts least recently used objects until the cache fits its budget.
func (c *Cache) Put(h string, obj []byte) error {
	if !validHash(h) {
		return fmt.Errorf("chunk cache put: %w: bad hash %.80q", ErrInvalidManifest, h)
	}
	if int64(len(obj)) > c.max || c.Has(h) {
		return nil
	}
	tmp, err := os.CreateTemp(c.tmpDir(), h[:8]+"-*")
	if err != nil {
		return fmt.Errorf("chunk cache put %s: %w", h, err)
	}
	_, err = tmp.Write(obj)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		now := c.now()
		err = os.Chtimes(tmp.Name(), now, now)
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(c.path(h)), 0o700)
	}
	if err == nil {
		err = c.insert(h, tmp.Name(), int64(len(obj)))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("chunk cache put %s: %w", h, err)
	}
	return nil
}

// insert renames the written file into place and indexes it, atomically with
// respect to eviction and other Puts.
func (c *Cache) insert(h, tmpPath string, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.idx[h]; ok { // a concurrent Put won
		c.lru.MoveToFront(el)
		return os.Remove(tmpPath)
	}
	if err := os.Rename(tmpPath, c.path(h)); err != nil {
		return err
	}
	c.idx[h] = c.lru.PushFront(&cacheEntry{hash: h, size: size})
	c.stats.Bytes += size
	c.stats.Entries = len(c.idx)
	c.stats.Puts++
	c.evictLocked(h)
	return nil
}

// evictLocked removes least recently used entries (never keep) until the
// cache fits its budget.
func (c *Cache) evictLocked(keep string) {
	for c.stats.Bytes > c.max {
		el := c.lru.Back()
		if el == nil {
			return
		}
		e := el.Value.(*cacheEntry)
		if e.hash == keep {
			if el = el.Prev(); el == nil {
				return
			}
			e = el.Value.(*cacheEntry)
		}
		c.removeLocked(el, e)
		c.stats.Evictions++
	}
}

func (c *Cache) removeLocked(el *list.Element, e *cacheEntry) {
	if err := os.Remove(c.path(e.hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("chunk cache: remove failed", "hash", e.hash, "err", err)
	}
	c.lru.Remove(el)
	delete(c.idx, e.hash)
	c.stats.Bytes -= e.size
	c.stats.Entries = len(c.idx)
}

// Remove drops h from the cache (e.g. after its data failed verification).
func (c *Cache) Remove(h string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.idx[h]; ok {
		c.removeLocked(el, el.Value.(*cacheEntry))
	}
}

// Stats returns the current counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Cache) count(f func(*CacheStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}
