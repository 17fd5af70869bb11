package vmimage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// Overlay creates a qcow2 copy-on-write layer at dst over the raw base
// image, so a machine's writes never reach the shared base.
func Overlay(ctx context.Context, qemuImg, base, dst string) error {
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", dst)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("create overlay %s: %w: %s", dst, err, tail(out.String(), 300))
	}
	return nil
}

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

// Rebase points the qcow2 overlay's backing-file reference at base without
// touching its data (qemu-img rebase -u): use it to store a bare image name
// in a portable copy, and to point a restored copy at the local image.
func Rebase(ctx context.Context, qemuImg, overlay, base string) error {
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, qemuImg, "rebase", "-q", "-u", "-b", base, "-F", "raw", overlay)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rebase overlay %s onto %s: %w: %s", overlay, base, err, tail(out.String(), 300))
	}
	return nil
}

// ReadOnlyView creates a qcow2 layer at dst over the raw image base with a
// virtual size of size bytes (at least base's): reads past base's end
// return zeros. Attached read-only, it shows a guest any image smaller
// than size as a disk of one fixed size, so the image behind it can change
// between a snapshot and its restore without the disk's size changing.
func ReadOnlyView(ctx context.Context, qemuImg, base, dst string, size int64) error {
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	_ = os.Remove(dst)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", dst, strconv.FormatInt(size, 10))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("create read-only view %s of %s: %w: %s", dst, base, err, tail(out.String(), 300))
	}
	return nil
}
