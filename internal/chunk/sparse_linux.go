package chunk

import (
	"errors"
	"os"
	"syscall"
)

// seekData is lseek(2)'s SEEK_DATA on Linux.
const seekData = 3

// nextData returns the offset of the first data byte at or after off, size
// if only a hole follows, and ok=false when the file system cannot tell
// (then every range must be read).
func nextData(f *os.File, off, size int64) (next int64, ok bool) {
	n, err := f.Seek(off, seekData)
	switch {
	case err == nil:
		return n, true
	case errors.Is(err, syscall.ENXIO):
		return size, true
	default:
		return 0, false
	}
}
