package localdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/blob"
)

// tmpDirName holds in-progress Puts. "~" is not a key byte, so no key can
// name it and List never descends into it. It lives inside Dir, on the same
// filesystem, so the final rename is atomic.
const tmpDirName = "~tmp"

// SweepAge is how old an unlocked temp file must be before New's sweep
// removes it.
const SweepAge = time.Minute

// putAttempts bounds retries when a concurrent Delete prunes the parent
// directory between creating it and renaming into it.
const putAttempts = 8

// copyBufSize is the buffer one Put copies through.
const copyBufSize = 1 << 20

// Config selects the directory.
type Config struct {
	// Dir is the store's root; created if missing.
	Dir string
}

// Deps are the injected collaborators.
type Deps struct {
	Logger *slog.Logger
}

// Store is a blob.Store on a local directory. The object with key "a/b"
// is the file Dir/a/b. Safe for concurrent use, also by several processes
// sharing Dir.
type Store struct {
	dir string
	tmp string
	log *slog.Logger
}

var _ blob.Store = (*Store)(nil)

// New opens (creating if needed) the store at cfg.Dir and sweeps temp files
// that crashed Puts left behind.
func New(cfg Config, deps Deps) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("open blob dir: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("open blob dir %s: %w", cfg.Dir, err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{dir: dir, tmp: filepath.Join(dir, tmpDirName), log: log.With("blob_dir", dir)}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("open blob dir %s: %w", dir, err)
	}
	if _, err := s.Sweep(context.Background(), SweepAge); err != nil {
		return nil, fmt.Errorf("open blob dir %s: %w", dir, err)
	}
	return s, nil
}

// Dir returns the store's absolute root directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(key string) string {
	return filepath.Join(s.dir, filepath.FromSlash(key))
}

// Put writes r to a locked temp file, fsyncs it, renames it over the key's
// file and fsyncs the directory. Concurrent Puts of one key: last rename
// wins; readers see one whole version.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if !blob.ValidKey(key) {
		return fmt.Errorf("put %q: %w", key, blob.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	start := time.Now()
	n, err := s.put(ctx, key, r, size)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	s.log.Debug("blob put", "key", key, "size", n, "duration", time.Since(start))
	return nil
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64) (n int64, err error) {
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return 0, fmt.Errorf("create temp file: %w", err)
	}
	renamed := false
	defer func() {
		_ = f.Close() // also releases the lock
		if !renamed {
			_ = os.Remove(f.Name())
		}
	}()
	// The lock tells Sweep (in any process) this temp file is live.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("lock temp file: %w", err)
	}
	if n, err = copyBody(ctx, f, r, size); err != nil {
		return n, err
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("sync temp file: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return n, err
	}
	dst := s.path(key)
	if err := s.renameInto(f.Name(), dst); err != nil {
		return n, err
	}
	renamed = true
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return n, err
	}
	return n, nil
}

// copyBody copies exactly size bytes (or to EOF when size < 0).
func copyBody(ctx context.Context, w io.Writer, r io.Reader, size int64) (int64, error) {
	buf := make([]byte, copyBufSize)
	src := blob.ContextReader(ctx, r)
	if size >= 0 {
		src = io.LimitReader(src, size)
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{w}, src, buf)
	if err != nil {
		return n, fmt.Errorf("write body: %w", err)
	}
	if size >= 0 && n != size {
		return n, fmt.Errorf("write body: short read: %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// renameInto creates dst's parent directories and renames src onto dst,
// retrying when a concurrent Delete prunes a parent in between.
func (s *Store) renameInto(src, dst string) error {
	var err error
	for range putAttempts {
		if err = s.mkdirAll(filepath.Dir(dst)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		err = os.Rename(src, dst)
		if err == nil {
			return nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if fi, serr := os.Lstat(dst); serr == nil && fi.IsDir() {
			// An empty directory left where the object goes: drop it and
			// retry. A non-empty one holds other keys: refuse.
			if os.Remove(dst) == nil {
				continue
			}
			return fmt.Errorf("rename into place: %s holds other keys under it", dst)
		}
		return fmt.Errorf("rename into place: %w", err)
	}
	return fmt.Errorf("rename into place: %w", err)
}

// mkdirAll creates dir and its missing parents below s.dir, fsyncing each
// parent that gained an entry so the new path survives a crash.
func (s *Store) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("make directory %s: store directory missing or path outside it", dir)
	}
	cur := s.dir
	for _, seg := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, seg)
		err := os.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			if err := syncDir(parent); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			fi, serr := os.Stat(cur)
			if serr != nil {
				return fmt.Errorf("make directory %s: %w", cur, serr)
			}
			if !fi.IsDir() {
				return fmt.Errorf("make directory %s: an object already has that key", cur)
			}
		default:
			return fmt.Errorf("make directory %s: %w", cur, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Get opens the object's file. The returned reader fails once ctx is done.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if !blob.ValidKey(key) {
		return nil, fmt.Errorf("get %q: %w", key, blob.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("get %s: %w", key, blob.ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		return nil, fmt.Errorf("get %s: %w", key, blob.ErrNotFound)
	}
	return blob.ContextReadCloser(ctx, f), nil
}

// notFound: the path is absent, or a parent is a file rather than a dir.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Stat describes the object; a directory (keys under it) is not one.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if !blob.ValidKey(key) {
		return blob.Info{}, fmt.Errorf("stat %q: %w", key, blob.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Lstat(s.path(key))
	if err != nil {
		if notFound(err) {
			return blob.Info{}, fmt.Errorf("stat %s: %w", key, blob.ErrNotFound)
		}
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, blob.ErrNotFound)
	}
	return blob.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete removes the object's file, then prunes parent directories left
// empty. An absent key (or one naming a directory) is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if !blob.ValidKey(key) {
		return fmt.Errorf("delete %q: %w", key, blob.ErrInvalidKey)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := s.path(key)
	fi, err := os.Lstat(p)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if fi.IsDir() {
		return nil
	}
	if err := os.Remove(p); err != nil && !notFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	s.prune(filepath.Dir(p))
	s.log.Debug("blob delete", "key", key)
	return nil
}

// prune removes dir and its parents up to the root while they are empty.
// Best effort: a concurrent Put recreates what it needs.
func (s *Store) prune(dir string) {
	for dir != s.dir && strings.HasPrefix(dir, s.dir+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}
