package pager

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tuneWriteback lifts the kernel's dirty-page limits for the mount: a FUSE
// file system gets a strict limit of 1% of the dirty threshold, which
// throttles a guest writing its (lazily served) memory to writeback
// speed. Guest RAM is written back to the agent's own overlay, which is
// as fast as page cache, so the global limits are enough. Best effort:
// an older kernel without the knobs keeps its defaults.
func tuneWriteback(mount string) error {
	var st unix.Stat_t
	if err := unix.Stat(mount, &st); err != nil {
		return err
	}
	bdi := filepath.Join("/sys/class/bdi", fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	for knob, v := range map[string]string{"strict_limit": "0", "max_ratio": "100"} {
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
