package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// snapFormat is the version of snapConfigFile. 2: images by content-
// addressed name and hash, no host paths anywhere in a snapshot. 3: RAM is
// a raw file (role "memory"), device state a separate stream ("state").
// Format 3 gained imageRef.ID (a caller's root filesystem) compatibly:
// snapshots without it read as before, and a reader without it refuses
// one with it (no image in its cache has that name and an empty SHA-256).
// 4: the machine has a harness disk (snapConfigFile.Harness, required); a
// format-3 snapshot has none and restores as before, without one.
const (
	snapFormat          = 4
	snapFormatNoHarness = 3
)

// snapConfigFile is the "config" role file: the machine shape a restore
// must reproduce exactly. It names no host path, so a snapshot restores on
// any host whose image cache holds the same images.
type snapConfigFile struct {
	Format        int                 `json:"format"`
	QEMUVersion   string              `json:"qemu_version"`
	Accel         string              `json:"accel"`
	MemoryMiB     int                 `json:"memory_mib"`
	VCPUs         int                 `json:"vcpus"`
	Network       bool                `json:"network"`
	Hostname      string              `json:"hostname"`
	Cmdline       string              `json:"cmdline"` // the guest kernel's, unchanged across restores
	KernelVersion string              `json:"kernel_version"`
	Images        map[string]imageRef `json:"images"` // role (imageRoles) -> image
	// Harness is the machine's harness disk: the identity of the image it
	// ran with (vmm.Spec.Harness.ID, or the placeholder's) and the disk's
	// size. Format 4 only.
	Harness *snapHarness `json:"harness,omitempty"`
}

// imageRef names a content-addressed image (vmimage's cache name, the same
// on every host for the same inputs) and the SHA-256 of its bytes. A
// caller's root filesystem (vmm.Spec.RootFS, role "rootfs" only) is named
// by the caller's ID instead, never hashed here; Name is then its file's
// bare name, for people (a restore finds it through Spec.RootFS).
type imageRef struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256,omitempty"`
	ID     string `json:"id,omitempty"`
}

// imageRoles are the images a machine runs on, in a fixed order.
var imageRoles = []string{"kernel", "initramfs", "rootfs", "bundle"}

func imagePath(im *vmimage.Images, role string) *string {
	switch role {
	case "kernel":
		return &im.Kernel
	case "initramfs":
		return &im.Initramfs
	case "rootfs":
		return &im.RootFS
	}
	return &im.Bundle
}

// hashCache memoizes image content hashes per path (vmimage.ContentHash
// caches them on disk too; this saves the stat and read per snapshot).
type hashCache struct {
	mu   sync.Mutex
	sums map[string]string
}

func (c *hashCache) get(p string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sums[p]; ok {
		return s, nil
	}
	s, err := vmimage.ContentHash(p)
	if err != nil {
		return "", err
	}
	if c.sums == nil {
		c.sums = map[string]string{}
	}
	c.sums[p] = s
	return s, nil
}

// imageRefs describes the images of a running machine; rootID is the
// caller's identity of its root filesystem ("" for the configured one).
func (b *Backend) imageRefs(im vmimage.Images, rootID string) (map[string]imageRef, error) {
	refs := map[string]imageRef{}
	for _, role := range imageRoles {
		p := *imagePath(&im, role)
		if role == "rootfs" && rootID != "" {
			refs[role] = imageRef{Name: filepath.Base(p), ID: rootID}
			continue
		}
		sum, err := b.hashes.get(p)
		if err != nil {
			return nil, fmt.Errorf("describe %s image: %w", role, err)
		}
		refs[role] = imageRef{Name: filepath.Base(p), SHA256: sum}
	}
	return refs, nil
}

// localImages finds, in this host's image cache (the directories of the
// configured images), the images a snapshot names, and checks their bytes
// are the snapshot's. A missing or different image fails with its name.
// The root filesystem is root's when the snapshot names one by ID.
func (b *Backend) localImages(refs map[string]imageRef, root *vmm.RootFS) (vmimage.Images, error) {
	im := vmimage.Images{KernelVersion: b.cfg.Images.KernelVersion}
	for _, role := range imageRoles {
		ref, ok := refs[role]
		if role == "rootfs" && (ref.ID != "" || root != nil) {
			p, err := callerRoot(ref, root)
			if err != nil {
				return im, err
			}
			im.RootFS = p
			continue
		}
		if !ok || ref.Name == "" || filepath.Base(ref.Name) != ref.Name {
			return im, fmt.Errorf("snapshot config names no usable %s image (%q)", role, ref.Name)
		}
		dir := filepath.Dir(*imagePath(&b.cfg.Images, role))
		p := filepath.Join(dir, ref.Name)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return im, fmt.Errorf("snapshot needs %s image %s (sha256 %s), which this host's image cache %s lacks: %w",
				role, ref.Name, ref.SHA256, dir, vmm.ErrUnsupported)
		}
		sum, err := b.hashes.get(p)
		if err != nil {
			return im, fmt.Errorf("check %s image: %w", role, err)
		}
		if sum != ref.SHA256 {
			return im, fmt.Errorf("%s image %s on this host has sha256 %s, the snapshot's has %s (not built reproducibly?): %w",
				role, p, sum, ref.SHA256, vmm.ErrUnsupported)
		}
		*imagePath(&im, role) = p
	}
	return im, nil
}

// callerRoot checks root is the caller's root filesystem the snapshot ran
// on (ref) and returns its absolute path.
func callerRoot(ref imageRef, root *vmm.RootFS) (string, error) {
	switch {
	case ref.ID == "":
		return "", fmt.Errorf("spec names root filesystem %q, but the snapshot ran on the default root image %s: %w",
			root.ID, ref.Name, vmm.ErrUnsupported)
	case root == nil:
		return "", fmt.Errorf("snapshot ran on root filesystem %q (%s): restoring it needs Spec.RootFS with that ID: %w",
			ref.ID, ref.Name, vmm.ErrUnsupported)
	case root.ID != ref.ID:
		return "", fmt.Errorf("snapshot ran on root filesystem %q, Spec.RootFS is %q: %w", ref.ID, root.ID, vmm.ErrUnsupported)
	}
	return checkRootFS(root)
}

// checkRootFS checks a caller's root filesystem names an ID and an
// existing regular file, and returns its absolute path (the overlay's
// backing-file reference, resolved from wherever QEMU runs).
func checkRootFS(r *vmm.RootFS) (string, error) {
	if r.ID == "" || r.Path == "" {
		return "", fmt.Errorf("root filesystem needs a path and an ID, got %+v", *r)
	}
	p, err := filepath.Abs(r.Path)
	if err != nil {
		return "", fmt.Errorf("root filesystem %s: %w", r.ID, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("root filesystem %s: %w", r.ID, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return "", fmt.Errorf("root filesystem %s: %s is not a raw image file (mode %v, %d bytes)", r.ID, p, fi.Mode(), fi.Size())
	}
	return p, nil
}

// readSnapConfig reads and checks a snapshot's config file against this
// host and the restore spec.
func (b *Backend) readSnapConfig(spec vmm.Spec, snap vmm.Snapshot) (snapConfigFile, error) {
	var cfg snapConfigFile
	if snap.Backend != "qemu" {
		return cfg, fmt.Errorf("snapshot is from backend %q: %w", snap.Backend, vmm.ErrUnsupported)
	}
	for _, role := range []string{"memory", "state", "disk", "config"} {
		if snap.Files[role] == "" {
			return cfg, fmt.Errorf("snapshot has no %q file", role)
		}
	}
	data, err := os.ReadFile(snap.Files["config"])
	if err != nil {
		return cfg, fmt.Errorf("read snapshot config: %w", err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("read snapshot config: %w", err)
	}
	switch {
	case cfg.Format != snapFormat && cfg.Format != snapFormatNoHarness:
		return cfg, fmt.Errorf("snapshot config format %d, this host reads %d and %d: %w", cfg.Format, snapFormatNoHarness, snapFormat, vmm.ErrUnsupported)
	case cfg.QEMUVersion != b.version:
		return cfg, fmt.Errorf("snapshot taken with %q, this host runs %q: %w", cfg.QEMUVersion, b.version, vmm.ErrUnsupported)
	case cfg.Accel == "kvm" && b.accel != "kvm":
		return cfg, fmt.Errorf("snapshot taken under kvm, this host has %s (%s): %w", b.accel, b.reason, vmm.ErrUnsupported)
	case spec.MemoryMiB != 0 && spec.MemoryMiB != cfg.MemoryMiB:
		return cfg, fmt.Errorf("spec asks for %d MiB of memory, the snapshot has %d MiB (a saved state cannot change its RAM size)", spec.MemoryMiB, cfg.MemoryMiB)
	case spec.VCPUs != 0 && spec.VCPUs != cfg.VCPUs:
		return cfg, fmt.Errorf("spec asks for %d vCPUs, the snapshot has %d (a saved state cannot change its vCPU count)", spec.VCPUs, cfg.VCPUs)
	case spec.Dir == "" || !filepath.IsAbs(spec.Dir):
		return cfg, fmt.Errorf("spec.Dir must be an absolute path, got %q", spec.Dir)
	case (cfg.Format == snapFormat) != (cfg.Harness != nil):
		return cfg, fmt.Errorf("snapshot config format %d with harness disk %+v: format %d and only it has one", cfg.Format, cfg.Harness, snapFormat)
	case cfg.Harness != nil && (cfg.Harness.DiskBytes <= 0 || cfg.Harness.ID == ""):
		return cfg, fmt.Errorf("snapshot config names a harness disk without an ID or size: %+v", *cfg.Harness)
	}
	return cfg, nil
}

// writeSnapDisk copies the machine's overlay into dst and makes its
// backing-file reference the base image's bare name: the file then names
// no directory of this host.
func (m *machine) writeSnapDisk(ctx context.Context, dst string) error {
	if err := vmimage.CloneFile(m.path(fileDisk), dst); err != nil {
		return err
	}
	return vmimage.Rebase(ctx, m.b.cfg.QemuImg, dst, filepath.Base(m.st.Images.RootFS))
}

// placeRestoredDisk copies a snapshot's disk into the machine directory and
// points it at this host's copy of the base image.
func (b *Backend) placeRestoredDisk(ctx context.Context, src, dir, base string) error {
	dst := filepath.Join(dir, fileDisk)
	if err := vmimage.CloneFile(src, dst); err != nil {
		return err
	}
	if err := vmimage.Rebase(ctx, b.cfg.QemuImg, dst, base); err != nil {
		_ = os.Remove(dst)
		return err
	}
	return nil
}

// placeRestoredMemory makes a snapshot's RAM file the machine's RAM file:
// a hard link (no copy) when both are on one file system, else a sparse
// copy; a symlink when it is served in place (a pager fills it on first
// touch: a copy would read all of it). Its size must be the snapshot's RAM
// size. A link means the snapshot's file changes as the restored guest runs.
func placeRestoredMemory(src, dir string, memMiB int, served bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("place guest memory: %w", err)
	}
	if want := int64(memMiB) << 20; fi.Size() != want {
		return fmt.Errorf("place guest memory: snapshot memory file has %d bytes, its config says %d MiB", fi.Size(), memMiB)
	}
	dst := filepath.Join(dir, fileMemory)
	if served {
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("place guest memory: %w", err)
		}
		if err := os.Symlink(src, dst); err != nil {
			return fmt.Errorf("place guest memory: %w", err)
		}
		return nil
	}
	if err := linkOrClone(src, dst); err != nil {
		return fmt.Errorf("place guest memory: %w", err)
	}
	return nil
}

// linkOrClone makes dst name src's data: a hard link, or where that fails
// (another file system) a reflink or sparse copy. An existing dst is replaced.
func linkOrClone(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return vmimage.CloneFile(src, dst)
}
