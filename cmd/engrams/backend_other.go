//go:build !linux

package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
)

// pickBackend refuses: every vmm backend runs machines on Linux (KVM, or the
// guest daemon as a Linux process), so `engrams host run` and `engrams dev`
// need a Linux machine; the rest of the CLI works from here.
func pickBackend(_ context.Context, name, _ string, _ *slog.Logger) (backendChoice, error) {
	switch name {
	case "firecracker", "qemu", "process", "auto":
	default:
		return backendChoice{}, fmt.Errorf("--backend %q: use auto, firecracker, qemu or process", name)
	}
	return backendChoice{}, fmt.Errorf("--backend %s: running machines requires Linux (this is %s/%s); run the host agent on a Linux machine and point this CLI at its coordinator", name, runtime.GOOS, runtime.GOARCH)
}
