package oci

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves the finished tree into place, failing with fs.ErrExist rather
// than replacing a target created meanwhile (rename(2) would replace an empty one).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return os.Rename(from, to) // a filesystem without RENAME_NOREPLACE
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
