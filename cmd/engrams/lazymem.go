package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/engrams/engrams/internal/host/pager"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/vmm"
)

// lazyMemoryHelp is the --lazy-memory flag's help.
const lazyMemoryHelp = "serve a restored VM's memory on first touch, its working set fetched ahead: on, auto (on where the " +
	"backend and FUSE allow) or off; a lazily restored machine does not survive an agent restart (it resumes from its last snapshot)"

// lazyMemory mounts the pager that serves restored memory on first touch,
// as mode says: "auto" where the backend maps memory in place and FUSE
// mounts here (else restores rebuild memory whole, said once), "on"
// (failing if it cannot), "off". It returns nil when off, and the close
// to call once the agent stopped: the pager outlives the suspends the
// agent makes as it stops.
func lazyMemory(mode, dataDir string, caps vmm.Capabilities, log *slog.Logger) (snapshots.Pager, func(), error) {
	switch mode {
	case "off":
		return nil, func() {}, nil
	case "auto", "on":
	default:
		return nil, nil, fmt.Errorf("--lazy-memory %q: want auto, on or off", mode)
	}
	err := lazyMemoryUsable(caps)
	var p *pager.Pager
	if err == nil {
		p, err = pager.Mount(pager.Config{Mount: filepath.Join(dataDir, "lazy-memory")}, log.With("component", "pager"))
	}
	switch {
	case err == nil:
		log.Info("restores serve memory lazily: VMs start before their memory is local", "mount", filepath.Join(dataDir, "lazy-memory"))
		return p, p.Close, nil
	case mode == "on":
		return nil, nil, fmt.Errorf("--lazy-memory on: %w", err)
	}
	log.Info("restores rebuild memory whole before the VM starts", "reason", err)
	return nil, func() {}, nil
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
