package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// The harness disk: every machine booted by this backend has a third
// virtio-blk disk, read-only, with serial serialHarness, that init mounts
// at initproto.HarnessDir. It shows the caller's harness bundle
// (vmm.Spec.Harness) or, without one, the empty placeholder image
// (vmimage.Images.Harness) through a per-machine qcow2 view of a fixed
// size (harnessDiskBytes), so a restore can put another image behind it
// without the guest's idea of the disk's size going stale.
const (
	serialHarness    = "engrams-harness"
	fileHarness      = "harness.qcow2"
	harnessDiskBytes = int64(8) << 30
	// placeholderPrefix starts the harness identity of the placeholder.
	placeholderPrefix = "placeholder:sha256:"
)

// harnessDisk is what machine.json records of a machine's harness disk.
type harnessDisk struct {
	Image     string `json:"image"`      // the image behind the disk (host path)
	ID        string `json:"id"`         // vmm.Spec.Harness.ID, or placeholderPrefix+hash
	DiskBytes int64  `json:"disk_bytes"` // the disk's size as the guest sees it
}

// snapHarness is what a snapshot config records of the machine's harness
// disk (no host path); nil in a snapshot that predates harness disks.
type snapHarness struct {
	ID        string `json:"id"`
	DiskBytes int64  `json:"disk_bytes"`
}

// harnessImage is the image and identity the harness disk shows for h
// (nil: the placeholder). An image must fit a disk of limit bytes.
func (b *Backend) harnessImage(h *vmm.RootFS, limit int64) (string, string, error) {
	if h == nil {
		p := b.cfg.Images.Harness
		sum, err := b.hashes.get(p)
		if err != nil {
			return "", "", fmt.Errorf("harness placeholder: %w", err)
		}
		return p, placeholderPrefix + sum, nil
	}
	if h.ID == "" || h.Path == "" {
		return "", "", fmt.Errorf("harness needs a path and an ID, got %+v", *h)
	}
	p, err := filepath.Abs(h.Path)
	if err != nil {
		return "", "", fmt.Errorf("harness %s: %w", h.ID, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", "", fmt.Errorf("harness %s: %w", h.ID, err)
	}
	switch {
	case !fi.Mode().IsRegular() || fi.Size() == 0:
		return "", "", fmt.Errorf("harness %s: %s is not an image file (mode %v, %d bytes)", h.ID, p, fi.Mode(), fi.Size())
	case fi.Size() > limit:
		return "", "", fmt.Errorf("harness %s: %s has %d bytes, more than the harness disk's %d", h.ID, p, fi.Size(), limit)
	}
	return p, h.ID, nil
}

// bootHarness is the harness disk of a machine booted with h.
func (b *Backend) bootHarness(h *vmm.RootFS) (*harnessDisk, error) {
	img, id, err := b.harnessImage(h, harnessDiskBytes)
	if err != nil {
		return nil, err
	}
	return &harnessDisk{Image: img, ID: id, DiskBytes: harnessDiskBytes}, nil
}

// restoreHarness is the harness disk of a machine restored with spec from
// a snapshot whose harness disk was saved (nil: none), and whether the
// guest must mount it again (another image than the snapshot's).
func (b *Backend) restoreHarness(saved *snapHarness, spec vmm.Spec) (*harnessDisk, bool, error) {
	if saved == nil {
		if spec.Harness != nil {
			return nil, false, fmt.Errorf("harness %q: the snapshot predates harness disks: %w", spec.Harness.ID, vmm.ErrUnsupported)
		}
		return nil, false, nil
	}
	img, id, err := b.harnessImage(spec.Harness, saved.DiskBytes)
	if err != nil {
		return nil, false, err
	}
	h := &harnessDisk{Image: img, ID: id, DiskBytes: saved.DiskBytes}
	if id == saved.ID {
		return h, false, nil
	}
	if !spec.Rebind {
		return nil, false, fmt.Errorf("snapshot ran with harness %q, the spec gives %q, and only a Rebind restore changes it (a running session's harness cannot change under it): %w",
			saved.ID, id, vmm.ErrUnsupported)
	}
	return h, true, nil
}

// placeHarnessDisk creates the machine's view of h's image in dir.
func (b *Backend) placeHarnessDisk(ctx context.Context, dir string, h *harnessDisk) error {
	if h == nil {
		return nil
	}
	return vmimage.ReadOnlyView(ctx, b.cfg.QemuImg, h.Image, filepath.Join(dir, fileHarness), h.DiskBytes)
}

// snapHarnessOf is the snapshot record of a machine's harness disk.
func snapHarnessOf(h *harnessDisk) *snapHarness {
	if h == nil {
		return nil
	}
	return &snapHarness{ID: h.ID, DiskBytes: h.DiskBytes}
}
