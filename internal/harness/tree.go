package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// ErrInvalidTree: the bundle tree cannot become a harness bundle (a special
// file, a setuid program, an entrypoint missing, outside the tree or not
// runnable, a program whose C library contradicts the descriptor).
var ErrInvalidTree = errors.New("invalid harness tree")

// maxSymlinkHops bounds symlink resolution, as the kernel's ELOOP does.
const maxSymlinkHops = 40

// treeStats counts what a bundle tree holds.
type treeStats struct {
	Entries int   // files, directories and symlinks, the root excepted
	Bytes   int64 // bytes of regular files
}

// checkTree walks the tree at root: only directories, regular files and
// symlinks; no setuid or setgid bit; every directory readable and
// searchable and every file readable by all, since every inode is root's in
// the guest and agents need not run as root there.
func checkTree(root string) (treeStats, error) {
	var st treeStats
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := checkEntryMode(rel, info.Mode()); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if info.Mode().IsRegular() {
			st.Bytes += info.Size()
		}
		st.Entries++
		return nil
	})
	if err != nil {
		return treeStats{}, fmt.Errorf("check tree %s: %w", root, err)
	}
	return st, nil
}

// checkEntryMode refuses what a bundle may not hold (checkTree).
func checkEntryMode(rel string, mode fs.FileMode) error {
	switch {
	case mode&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return fmt.Errorf("%w: %s is setuid or setgid", ErrInvalidTree, rel)
	case mode.IsDir() && mode&0o005 != 0o005, mode.IsRegular() && mode&0o004 == 0:
		return fmt.Errorf("%w: %s (mode %v) is not readable by all; the guest sees every file as root's (chmod -R a+rX)",
			ErrInvalidTree, rel, mode)
	case mode.IsDir(), mode.IsRegular(), mode&fs.ModeSymlink != 0:
		return nil
	}
	return fmt.Errorf("%w: %s is a %v, not a file, directory or symlink", ErrInvalidTree, rel, mode.Type())
}

// resolveInside resolves the bundle path rel in the tree at root, following
// symlinks as the guest will, and refuses any that leave the tree (an
// absolute target names the image's files, not the bundle's). It returns
// the resolved bundle path ("" for the root itself).
func resolveInside(root, rel string) (string, error) {
	parts := strings.Split(rel, "/")
	cur, hops := "", 0
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if cur == "" {
				return "", fmt.Errorf("%q leads out of the bundle", rel)
			}
			if cur = path.Dir(cur); cur == "." {
				cur = ""
			}
			continue
		}
		next := path.Join(cur, p)
		st, err := os.Lstat(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", fmt.Errorf("%q: %w", rel, err)
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return "", fmt.Errorf("%q: too many levels of symbolic links", rel)
		}
		target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", fmt.Errorf("%q: %w", rel, err)
		}
		if path.IsAbs(target) {
			return "", fmt.Errorf("%q: %s links to the absolute path %q, outside the bundle", rel, next, target)
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return cur, nil
}

// checkEntrypoint checks that every entrypoint element is a regular file
// inside the tree, that the first is executable, and, when it is an ELF
// program, that it is x86-64 and its C library agrees with d.Requires.
func checkEntrypoint(root string, d guestapi.HarnessDescriptor) error {
	for i, rel := range d.Entrypoint {
		res, err := resolveInside(root, rel)
		if err != nil {
			return fmt.Errorf("%w: entrypoint[%d]: %v", ErrInvalidTree, i, err)
		}
		host := filepath.Join(root, filepath.FromSlash(res))
		st, err := os.Stat(host)
		if err != nil {
			return fmt.Errorf("%w: entrypoint[%d]: %v", ErrInvalidTree, i, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%w: entrypoint[%d] %q is not a regular file", ErrInvalidTree, i, rel)
		}
		if i > 0 {
			continue
		}
		if st.Mode()&0o001 == 0 {
			return fmt.Errorf("%w: entrypoint[0] %q is not executable by all (mode %v)", ErrInvalidTree, rel, st.Mode())
		}
		if err := checkProgram(host, rel, d.Requires); err != nil {
			return err
		}
	}
	return nil
}

// checkProgram refuses an ELF entrypoint that cannot run where d.Requires
// says the harness runs. Scripts are not inspected.
func checkProgram(host, rel string, req guestapi.HarnessRequires) error {
	ok, err := isELF(host)
	if err != nil || !ok {
		return err
	}
	info, err := inspectELF(host)
	if err != nil {
		return fmt.Errorf("%w: entrypoint %q: %v", ErrInvalidTree, rel, err)
	}
	switch {
	case info.Libc != guestapi.LibcNone && info.Libc != req.Libc:
		return fmt.Errorf("%w: entrypoint %q needs %s but requires.libc is %q", ErrInvalidTree, rel, info.Libc, req.Libc)
	case info.GlibcMin != "" && req.GlibcMin != "" && guestapi.CompareVersions(req.GlibcMin, info.GlibcMin) < 0:
		return fmt.Errorf("%w: entrypoint %q needs glibc %s but requires.glibc_min is %s",
			ErrInvalidTree, rel, info.GlibcMin, req.GlibcMin)
	}
	return nil
}
