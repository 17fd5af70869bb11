package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// own gives name the entry's numeric owner (the guest's /etc/passwd is the image's).
func (t *tree) own(name string, hdr *tar.Header) error {
	if t.cfg.SkipOwnership {
		return nil
	}
	if err := t.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	return nil
}

// paxXattr is the PAX record prefix that carries extended attributes.
const paxXattr = "SCHILY.xattr."

// xattrs applies the entry's file capabilities (security.capability, e.g. Debian's
// ping) and user.* attributes (where the filesystem has them); other namespaces (trusted.*, security.selinux, …) are
// host policy, not image content, and are dropped. Call it after own: chown clears
// file capabilities.
func (t *tree) xattrs(name string, hdr *tar.Header) error {
	var keys []string
	for k := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, paxXattr); ok &&
			(x == "security.capability" && !t.cfg.SkipOwnership || strings.HasPrefix(x, "user.")) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	p := filepath.Join(t.dir, name) // every ancestor was checked to be a real directory
	for _, k := range keys {
		x := strings.TrimPrefix(k, paxXattr)
		err := unix.Lsetxattr(p, x, []byte(hdr.PAXRecords[k]), 0)
		if errors.Is(err, unix.ENOTSUP) && strings.HasPrefix(x, "user.") {
			continue // the filesystem has no user xattrs; nothing in a guest relies on them
		}
		if err != nil {
			return fmt.Errorf("entry %q: set xattr %s: %w", hdr.Name, x, err)
		}
	}
	return nil
}

// lutimes sets a symlink's own times.
func lutimes(p string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// finish removes the placeholders of what was left out, then gives every directory
// still in the tree its final mode and times.
func (t *tree) finish() error {
	if err := t.removeLeftOut(); err != nil {
		return err
	}
	names := make([]string, 0, len(t.dirs))
	for n := range t.dirs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fi, err := t.root.Lstat(n)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
			continue // removed or replaced by a later layer
		}
		if err != nil {
			return fmt.Errorf("directory %q: %w", n, err)
		}
		m := t.dirs[n]
		if err := t.root.Chmod(n, m.mode); err != nil {
			return fmt.Errorf("directory %q: %w", n, err)
		}
		if err := t.root.Chtimes(n, m.mtime, m.mtime); err != nil {
			return fmt.Errorf("directory %q: %w", n, err)
		}
	}
	return nil
}
