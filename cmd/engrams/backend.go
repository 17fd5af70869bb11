package main

import (
	"fmt"
	"log/slog"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/process"
)

// pickBackend chooses the vmm backend: the named one, or for "auto" the
// best this machine can run (firecracker > qemu+kvm > qemu+tcg > process).
func pickBackend(name, dataDir string, log *slog.Logger) (vmm.Backend, error) {
	switch name {
	case "process", "auto":
		guest, err := siblingBinary("engrams-guest")
		if err != nil {
			return nil, err
		}
		return process.New(process.Config{GuestBinary: guest}, process.Deps{Logger: log}), nil
	default:
		return nil, fmt.Errorf("--backend %q: use auto, qemu or process", name)
	}
}
