//go:build !linux

package oci

import (
	"errors"
	"io/fs"
	"os"
)

// renameChecked renames from to to unless to exists (fs.ErrExist): the portable
// fallback of renameNoReplace, which leaves a window between the check and the rename.
func renameChecked(from, to string) error {
	if _, err := os.Lstat(to); !errors.Is(err, fs.ErrNotExist) {
		if err == nil {
			err = fs.ErrExist
		}
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return os.Rename(from, to)
}
