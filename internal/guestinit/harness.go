package guestinit

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// harnessWait bounds the wait for the harness disk: it is probed with the
// root and bundle disks, so it is there once they are, or not at all.
const harnessWait = 2 * time.Second

// harnessFlags mount the harness read-only, without devices or setuid.
const harnessFlags = unix.MS_RDONLY | unix.MS_NODEV | unix.MS_NOSUID

// Harness mounts the harness disk at its directory. The system calls are
// fields so tests can stand in for them; newHarness sets the real ones.
type Harness struct {
	device  string // "serial:NAME" or a device path; "" when the machine has none
	dir     string
	resolve func(spec string, wait time.Duration) (string, error)
	mkdir   func(dir string) error
	mount   func(dev, dir string) error
	unmount func(dir string) error
	flush   func(dev string) error
}

// newHarness is the harness disk device (Params.Harness) mounted at HarnessDir.
func newHarness(device string) *Harness {
	return &Harness{
		device:  device,
		dir:     initproto.HarnessDir,
		resolve: resolveDevice,
		mkdir:   func(dir string) error { return os.MkdirAll(dir, 0o755) },
		mount: func(dev, dir string) error {
			return unix.Mount(dev, dir, initproto.HarnessFSType, harnessFlags, "")
		},
		unmount: func(dir string) error { return unix.Unmount(dir, 0) },
		flush:   flushBlockDevice,
	}
}

// Mount mounts the harness device at the harness directory, creating it.
// A machine without a harness disk has nothing to mount.
func (h *Harness) Mount() error {
	if h == nil || h.device == "" {
		return nil
	}
	dev, err := h.resolve(h.device, harnessWait)
	if err != nil {
		return fmt.Errorf("mount harness: %w", err)
	}
	return h.mountDev(dev)
}

func (h *Harness) mountDev(dev string) error {
	if err := h.mkdir(h.dir); err != nil {
		return fmt.Errorf("mount harness: %w", err)
	}
	if err := h.mount(dev, h.dir); err != nil {
		return fmt.Errorf("mount harness %s (%s) on %s: %w", dev, initproto.HarnessFSType, h.dir, err)
	}
	return nil
}

// Remount mounts the harness device again after the host attached another
// image to it (a restore with another bundle): it unmounts the harness,
// drops the device's cached blocks of the old image (BLKFLSBUF) and
// mounts it anew. An unmount refused because the old bundle is in use
// fails: a new mount of the same device would share the old mount's file
// system instance, with the old image's cached metadata over the new
// image's blocks.
func (h *Harness) Remount() error {
	if h == nil || h.device == "" {
		return errors.New("remount harness: this machine has no harness disk")
	}
	dev, err := h.resolve(h.device, harnessWait)
	if err != nil {
		return fmt.Errorf("remount harness: %w", err)
	}
	switch err := h.unmount(h.dir); {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("remount harness: %s is in use (a process keeps a file of the old bundle open): %w", h.dir, err)
	case err != nil && !errors.Is(err, unix.EINVAL): // EINVAL: not mounted
		return fmt.Errorf("remount harness: unmount %s: %w", h.dir, err)
	}
	if err := h.flush(dev); err != nil {
		return fmt.Errorf("remount harness: %w", err)
	}
	return h.mountDev(dev)
}

// flushBlockDevice writes back and drops dev's cached blocks (BLKFLSBUF).
func flushBlockDevice(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("flush %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
		return fmt.Errorf("flush %s: BLKFLSBUF: %w", dev, err)
	}
	return nil
}
