package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrWorkDirUnsafe is returned (wrapped) when the work directory, or one above it,
// could be changed or redirected by another user: image trees built there would be
// theirs to swap.
var ErrWorkDirUnsafe = errors.New("image work dir is not private")

// checkWorkDir refuses dir unless it is private to this user: a real directory (not
// a symlink; os.Lstat), owned by this user and writable by no one else, below
// directories owned by this user or root and writable by no one else unless sticky
// (like /tmp).
func checkWorkDir(dir string) error {
	uid := os.Geteuid()
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check image work dir: %w", err)
	}
	if err := private(dir, fi, uid, false); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(filepath.Dir(abs))
	}
	if err != nil {
		return fmt.Errorf("check image work dir %s: %w", dir, err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("check image work dir %s: %w", dir, err)
		}
		if err := private(p, fi, uid, true); err != nil {
			return err
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// private checks one directory: the work dir itself (above false) or one above it.
func private(p string, fi fs.FileInfo, uid int, above bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink; give the directory itself", ErrWorkDirUnsafe, p)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrWorkDirUnsafe, p)
	case !ok:
		return fmt.Errorf("%w: the owner of %s is unknown", ErrWorkDirUnsafe, p)
	case int(st.Uid) != uid && (!above || st.Uid != 0):
		return fmt.Errorf("%w: %s is owned by uid %d, not this user (uid %d)", ErrWorkDirUnsafe, p, st.Uid, uid)
	case fi.Mode().Perm()&0o022 != 0 && (!above || fi.Mode()&fs.ModeSticky == 0):
		return fmt.Errorf("%w: %s is writable by other users (mode %v): use a directory only this user can change",
			ErrWorkDirUnsafe, p, fi.Mode().Perm())
	}
	return nil
}

// makeWorkDir creates one call's work directory in parent, after checking parent is
// private, and checks what it made: 0700 and this user's.
func makeWorkDir(parent string) (string, error) {
	if err := checkWorkDir(parent); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(parent, workPrefix)
	if err != nil {
		return "", fmt.Errorf("create work dir: %w", err)
	}
	fi, err := os.Lstat(work)
	if err == nil {
		err = private(work, fi, os.Geteuid(), false)
	}
	if err == nil && fi.Mode().Perm() != 0o700 {
		err = fmt.Errorf("%w: %s was created with mode %v, not 0700", ErrWorkDirUnsafe, work, fi.Mode().Perm())
	}
	if err != nil {
		_ = os.RemoveAll(work)
		return "", err
	}
	return work, nil
}
