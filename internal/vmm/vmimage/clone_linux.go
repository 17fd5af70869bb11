package vmimage

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// CloneFile copies src to dst, as a reflink when the filesystem supports
// it and as a sparse-preserving copy otherwise.
func CloneFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return out.Close()
	}
	if err := sparseCopy(in, out); err != nil {
		out.Close()
		return fmt.Errorf("clone %s: %w", src, err)
	}
	return out.Close()
}

// sparseCopy copies data regions only (SEEK_DATA/SEEK_HOLE), then sets the size.
func sparseCopy(in, out *os.File) error {
	st, err := in.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	fd := int(in.Fd())
	var off int64
	for off < size {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no more data
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = size
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return out.Truncate(size)
}
