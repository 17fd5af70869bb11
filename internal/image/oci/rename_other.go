//go:build !linux && !darwin

package oci

// renameNoReplace moves the finished tree into place, failing with fs.ErrExist rather
// than replacing a target that exists. This platform has no atomic no-replace rename:
// a target created between the check and the rename may still be replaced.
func renameNoReplace(from, to string) error { return renameChecked(from, to) }
