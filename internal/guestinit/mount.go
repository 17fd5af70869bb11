package guestinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

type mountSpec struct {
	src, dst, fstype string
	flags            uintptr
	data             string
}

func mountAll(ms []mountSpec) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	return nil
}

// EarlyMounts mounts what stage 1 needs inside the initramfs.
func EarlyMounts() error {
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	return mountAll([]mountSpec{
		{"proc", "/proc", "proc", nosuid, ""},
		{"sysfs", "/sys", "sysfs", nosuid, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	})
}

// MountRoot mounts the root device on newroot and the bundle device
// read-only at newroot+BundleDir, waiting for the devices to appear.
func MountRoot(p initproto.Params, newroot string) error {
	root, err := resolveDevice(p.Root, 5*time.Second)
	if err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	if err := unix.Mount(root, newroot, p.RootFSType, 0, ""); err != nil {
		return fmt.Errorf("mount root %s (%s): %w", p.Root, p.RootFSType, err)
	}
	if p.Bundle == "" {
		return nil
	}
	bundle, err := resolveDevice(p.Bundle, 5*time.Second)
	if err != nil {
		return fmt.Errorf("mount bundle: %w", err)
	}
	dst := filepath.Join(newroot, initproto.BundleDir)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("mount bundle: %w", err)
	}
	fstype := p.BundleFSType
	data := ""
	if fstype == "ext4" {
		data = "noload"
	}
	if err := unix.Mount(bundle, dst, fstype, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, data); err != nil {
		return fmt.Errorf("mount bundle %s (%s): %w", p.Bundle, fstype, err)
	}
	return nil
}

// resolveDevice turns "serial:NAME" into the /dev/vdX whose virtio-blk
// serial is NAME; other values are device paths. It waits up to d.
func resolveDevice(spec string, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		if serial, ok := strings.CutPrefix(spec, "serial:"); ok {
			m, _ := filepath.Glob("/sys/block/*/serial")
			for _, f := range m {
				b, err := os.ReadFile(f)
				if err == nil && strings.TrimSpace(string(b)) == serial {
					return "/dev/" + filepath.Base(filepath.Dir(f)), nil
				}
			}
		} else if _, err := os.Stat(spec); err == nil {
			return spec, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("device %s did not appear in %s", spec, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SwitchRoot moves /dev /proc /sys into newroot, frees the initramfs,
// makes newroot the root and chroots into it (what switch_root does).
func SwitchRoot(newroot string) error {
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		dst := filepath.Join(newroot, d)
		_ = os.MkdirAll(dst, 0o755)
		if err := unix.Mount(d, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("switch root: move %s: %w", d, err)
		}
	}
	freeInitramfs(newroot)
	if err := unix.Chdir(newroot); err != nil {
		return fmt.Errorf("switch root: chdir: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("switch root: move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switch root: chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("switch root: chdir /: %w", err)
	}
	return nil
}

// freeInitramfs deletes the initramfs files (rootfs cannot be unmounted;
// deleting returns its memory), staying on the rootfs device.
func freeInitramfs(keep string) {
	var root unix.Stat_t
	if unix.Lstat("/", &root) != nil {
		return
	}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			var st unix.Stat_t
			if p == keep || unix.Lstat(p, &st) != nil || st.Dev != root.Dev {
				continue
			}
			if e.IsDir() {
				walk(p)
			}
			_ = os.Remove(p)
		}
	}
	walk("/")
}

// LateMounts mounts the runtime file systems inside the final root.
func LateMounts() error {
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV
	return mountAll([]mountSpec{
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666"},
		{"tmpfs", "/dev/shm", "tmpfs", nosuid, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", nosuid, "mode=0755"},
	})
}
