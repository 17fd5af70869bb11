package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

var _ vmm.Reaper = (*Backend)(nil)

// VMMs lists the QEMU processes this backend started for a machine dir
// under root, one per spawn, found by their environment marker.
func (b *Backend) VMMs(_ context.Context, root string) ([]vmm.VMM, error) {
	found, err := vmproc.Scan(root)
	if err != nil {
		return nil, fmt.Errorf("list qemu processes: %w", err)
	}
	return vmproc.Group(found), nil
}

// Reap kills the processes of v and removes the cgroup of each.
func (b *Backend) Reap(ctx context.Context, v vmm.VMM) error {
	if err := vmproc.Reap(ctx, v); err != nil {
		return fmt.Errorf("reap qemu: %w", err)
	}
	b.removeCgroups(v)
	return nil
}

func (b *Backend) removeCgroups(v vmm.VMM) {
	if !b.cgroup {
		return
	}
	sid := filepath.Base(v.Dir)
	for _, p := range v.Processes {
		_ = os.Remove(filepath.Join(b.cfg.CgroupParent, cgroupName(sid, p.PID))) // an empty cgroup dir

	}
}

// reapSpawn kills every process marked with dir and spawn id (a start
// that failed or that no record will own) and waits briefly for them.
func (b *Backend) reapSpawn(dir, spawn string) {
	b.reapIn(dir, func(m vmproc.Marked) bool { return m.Spawn == spawn })
}

// reapIn kills every process marked for the machine dir dir that pick
// picks.
func (b *Backend) reapIn(dir string, pick func(vmproc.Marked) bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	found, err := vmproc.Scan(abs)
	if err != nil {
		b.log.Warn("scan for qemu processes", "dir", dir, "err", err)
		return
	}
	var mine []vmproc.Marked
	for _, m := range found {
		if m.Dir == abs && pick(m) {
			mine = append(mine, m)
		}
	}
	if len(mine) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range vmproc.Group(mine) {
		if err := b.Reap(ctx, v); err != nil {
			b.log.Warn("reap qemu process", "dir", dir, "err", err)
			continue
		}
		b.log.Info("reaped a qemu process no record owns", "session_id", filepath.Base(dir), "pids", v.Processes)
	}
}
