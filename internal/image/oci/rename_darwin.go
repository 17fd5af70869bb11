package oci

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves the finished tree into place, failing with fs.ErrExist rather
// than replacing a target created meanwhile: renamex_np(2) with RENAME_EXCL (APFS and
// HFS+); on a file system without it, the check-then-rename of renameChecked.
func renameNoReplace(from, to string) error {
	err := unix.RenamexNp(from, to, unix.RENAME_EXCL)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) {
		return renameChecked(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
