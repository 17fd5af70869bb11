package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxSymlinks bounds symlink hops in one lookup, as the kernel's ELOOP does.
const maxSymlinks = 40

var errLoop = errors.New("too many levels of symbolic links")

// HasShell reports whether the tree at root has an executable /bin/sh, following
// symlinks the way the guest will: inside root (Alpine's /bin/sh is a symlink to
// /bin/busybox). A missing, dangling, looping or non-executable /bin/sh is false.
func HasShell(root string) (bool, error) {
	fi, err := lookupInRoot(root, "/bin/sh")
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errLoop):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up /bin/sh: %w", err)
	}
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0, nil
}

// lookupInRoot resolves name inside root as if root were "/" (resolveInRoot) and
// returns what it names.
func lookupInRoot(root, name string) (fs.FileInfo, error) {
	cur, err := resolveInRoot(root, name)
	if err != nil {
		return nil, err
	}
	return os.Lstat(filepath.Join(root, cur))
}

// LstatInRoot is os.Lstat of name inside the tree at root as the guest would see it:
// its directories are resolved inside root (a symlink among them, even an absolute
// one, never leads out of it) and its last component is not followed.
func LstatInRoot(root, name string) (fs.FileInfo, error) {
	dir, err := resolveInRoot(root, path.Dir(path.Clean("/"+name)))
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(filepath.Join(root, dir))
	switch {
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return nil, fs.ErrNotExist
	}
	return os.Lstat(filepath.Join(root, dir, path.Base(path.Clean("/"+name))))
}

// resolveInRoot resolves name inside root as if root were "/": absolute symlink
// targets start again at root and ".." stops at it. It returns the resolved name,
// relative to root. Every host path it touches is made only of components already
// found to be real directories, so no host symlink is followed.
func resolveInRoot(root, name string) (string, error) {
	todo := strings.Split(name, "/")
	cur, hops := ".", 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if hops++; hops > maxSymlinks {
				return "", errLoop
			}
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				cur = "."
			}
			todo = append(strings.Split(target, "/"), todo...)
		case len(todo) > 0 && !fi.IsDir():
			return "", fs.ErrNotExist // a file where a directory should be: ENOTDIR
		default:
			cur = next
		}
	}
	return cur, nil
}
