package pager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tuneWriteback raises the kernel's dirty-page limits for the mount: a
// FUSE file system gets a strict limit of 1% of the dirty threshold, which
// throttles a guest writing its (lazily served) memory to writeback
// speed. Guest RAM is written back to the agent's own overlay, as fast as
// page cache; the mount may hold up to half the host's dirty budget, so
// the overlay writes that clean it (and every other writer) never starve.
// Best effort: an older kernel without the knobs keeps its defaults.
func tuneWriteback(mount string) error {
	var st unix.Stat_t
	if err := unix.Stat(mount, &st); err != nil {
		return err
	}
	bdi := filepath.Join("/sys/class/bdi", fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	for knob, v := range map[string]string{"strict_limit": "0", "max_ratio": "50"} {
		if err := os.WriteFile(filepath.Join(bdi, knob), []byte(v), 0); err != nil {
			return fmt.Errorf("set %s of %s: %w", knob, bdi, err)
		}
	}
	return nil
}

// fuseFdsCloseOnExec marks every /dev/fuse descriptor of this process
// close-on-exec. go-fuse's direct mount leaves its descriptor inheritable,
// and a VMM that inherited it would keep the connection alive after the
// agent died: its faults then wait forever instead of failing. Call it
// with syscall.ForkLock held from before the mount.
func fuseFdsCloseOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != "/dev/fuse" {
			continue
		}
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// connection names the mount's FUSE connection (its device's minor
// number), under /sys/fs/fuse/connections.
func connection(mount string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(mount, &st); err != nil {
		return 0, err
	}
	return unix.Minor(st.Dev), nil
}

// abortConnection ends FUSE connection conn: requests waiting on it and
// later ones fail at once, so no VMM hangs on a server that is going
// away. It mounts fusectl where the host has not.
func abortConnection(conn uint32) error {
	const ctl = "/sys/fs/fuse/connections"
	p := filepath.Join(ctl, fmt.Sprint(conn), "abort")
	if _, err := os.Stat(p); err != nil {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(p, []byte("1"), 0)
}
