package vmimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
