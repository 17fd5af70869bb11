package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/engrams/engrams/internal/host/pager"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/vmm"
)

// lazyMemory mounts the pager that serves restored memory on first touch,
// as mode says: "auto" where the backend maps memory in place and FUSE
// mounts here (else restores rebuild memory whole, said once), "on"
// (failing if it cannot), "off". It returns nil when off.
func lazyMemory(ctx context.Context, mode, dataDir string, caps vmm.Capabilities, log *slog.Logger) (snapshots.Pager, error) {
	switch mode {
	case "off":
		return nil, nil
	case "auto", "on":
	default:
		return nil, fmt.Errorf("--lazy-memory %q: want auto, on or off", mode)
	}
	err := lazyMemoryUsable(caps)
	var p *pager.Pager
	if err == nil {
		p, err = pager.Mount(ctx, pager.Config{Mount: filepath.Join(dataDir, "lazy-memory")}, log.With("component", "pager"))
	}
	switch {
	case err == nil:
		log.Info("restores serve memory lazily: VMs start before their memory is local", "mount", filepath.Join(dataDir, "lazy-memory"))
		return p, nil
	case mode == "on":
		return nil, fmt.Errorf("--lazy-memory on: %w", err)
	}
	log.Info("restores rebuild memory whole before the VM starts", "reason", err)
	return nil, nil
}

func lazyMemoryUsable(caps vmm.Capabilities) error {
	if !caps.LazyMemory {
		return fmt.Errorf("the %s backend does not map memory in place", caps.Name)
	}
	if os.Geteuid() != 0 {
		return errors.New("mounting the pager's FUSE file system needs root")
	}
	return pager.Available()
}
