package localdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/blob"
)

// List walks the directory tree below the deepest directory the prefix
// names, visiting each directory's entries sorted as key text ("name/" for
// directories), which yields byte-wise key order. Names that are not key
// segments (the temp directory, stray files) are skipped.
func (s *Store) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	if !blob.PrefixCanMatch(prefix) {
		return nil
	}
	base := "" // the deepest directory the prefix names
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i+1]
	}
	if err := s.walk(ctx, base, prefix, fn); err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	return nil
}

type entry struct {
	name  string
	dir   bool
	order string
}

// walk visits the directory holding keys that start with keyDir (empty or
// ending in "/").
func (s *Store) walk(ctx context.Context, keyDir, prefix string, fn func(blob.Info) error) error {
	dirents, err := os.ReadDir(filepath.Join(s.dir, filepath.FromSlash(keyDir)))
	if err != nil {
		if notFound(err) {
			return nil // vanished, or the prefix names an object
		}
		return err
	}
	entries := make([]entry, 0, len(dirents))
	for _, d := range dirents {
		if !blob.ValidKey(d.Name()) { // one valid segment
			continue
		}
		e := entry{name: d.Name(), dir: d.IsDir(), order: d.Name()}
		if e.dir {
			e.order += "/"
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.order, b.order) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		key := keyDir + e.name
		if e.dir {
			sub := key + "/"
			if strings.HasPrefix(sub, prefix) || strings.HasPrefix(prefix, sub) {
				if err := s.walk(ctx, sub, prefix, fn); err != nil {
					return err
				}
			}
			continue
		}
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(s.dir, filepath.FromSlash(key)))
		if err != nil {
			if notFound(err) {
				continue // deleted while listing
			}
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if err := fn(blob.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}
