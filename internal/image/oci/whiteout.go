package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// whiteout applies a whiteout entry: ".wh..wh..opq" hides everything lower layers put in
// its directory; ".wh.NAME" hides NAME. Neither hides what the current layer writes,
// wherever in the layer the marker comes. Whiteout entries are never materialized.
func (t *tree) whiteout(name, base string) error {
	dir := path.Dir(name)
	if base == whiteoutOpaque {
		return t.hide(name, dir, true)
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS metadata (.wh..wh.plnk, …): not part of the tree
	}
	hidden := strings.TrimPrefix(base, whiteoutPrefix)
	if hidden == "" || hidden == "." || hidden == ".." {
		return unsafeEntry(name, "is a whiteout of %q", hidden)
	}
	return t.hide(name, path.Join(dir, hidden), false)
}

// hide removes what lower layers put at name (or, for an opaque directory, below it).
func (t *tree) hide(entry, name string, opaque bool) error {
	ok, err := t.parents(entry, name, false)
	if err != nil || !ok {
		return err
	}
	fi, err := t.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("entry %q: %w", entry, err)
	case opaque && fi.Mode()&fs.ModeSymlink != 0:
		return unsafeEntry(entry, "would be applied through the symlink %q", name)
	case opaque && !fi.IsDir():
		return nil
	}
	if opaque || t.written[name] || t.ancestors[name] {
		if !fi.IsDir() {
			return nil // this layer wrote the file: it stays
		}
		return t.prune(entry, name)
	}
	if err := t.clear(name); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	return nil
}

// prune removes everything below dir that the current layer did not write, keeping
// the directories that lead to what it did: dir and those directories are re-created
// by the current layer (what lower layers put in them is gone).
func (t *tree) prune(entry, dir string) error {
	if dir != "." {
		t.created[dir] = t.layer
	}
	f, err := t.root.Open(dir)
	if err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	ents, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	for _, e := range ents {
		child := path.Join(dir, e.Name())
		keep := t.written[child] || t.ancestors[child]
		if keep && e.IsDir() {
			if err := t.prune(entry, child); err != nil {
				return err
			}
			continue
		}
		if keep {
			continue
		}
		if err := t.clear(child); err != nil {
			return fmt.Errorf("entry %q: %w", entry, err)
		}
	}
	return nil
}
