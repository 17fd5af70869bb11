package firecracker

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mergeLayer copies the data regions of a sparse Diff memory layer over
// dst at the same offsets (holes are pages the layer does not carry).
func mergeLayer(layer, dst string) error {
	in, err := os.Open(layer)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	st, err := in.Stat()
	if err != nil {
		out.Close()
		return err
	}
	if err := copyDataRegions(in, out, st.Size()); err != nil {
		out.Close()
		return fmt.Errorf("merge %s into %s: %w", layer, dst, err)
	}
	return out.Close()
}

func copyDataRegions(in, out *os.File, size int64) error {
	fd := int(in.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			return nil // ENXIO: no data after off
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
	return nil
}
