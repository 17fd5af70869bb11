package process_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/process"
)

// TestRootFSUnsupported checks the process backend, which runs guest
// commands on the host's file system, refuses a caller's root filesystem.
func TestRootFSUnsupported(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	if b.Capabilities().RootFS {
		t.Fatal("process backend claims Capabilities.RootFS")
	}
	root := &vmm.RootFS{Path: filepath.Join(t.TempDir(), "root.ext4"), ID: "sha256:test"}
	if err := os.WriteFile(root.Path, []byte("ext4"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func(vmm.Spec) (vmm.Machine, error)
	}{
		{"boot", func(s vmm.Spec) (vmm.Machine, error) { return b.Boot(context.Background(), s) }},
		{"restore", func(s vmm.Spec) (vmm.Machine, error) {
			return b.Restore(context.Background(), s, vmm.Snapshot{Backend: "process", Files: map[string]string{"disk": root.Path}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m, err := tt.run(vmm.Spec{SessionID: "rootfs", Dir: dir, RootFS: root})
			if m != nil {
				_ = m.Destroy(context.Background())
			}
			if !errors.Is(err, vmm.ErrUnsupported) {
				t.Fatalf("%s with Spec.RootFS = %v, want ErrUnsupported", tt.name, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("refused %s left files: %v", tt.name, entries)
			}
		})
	}
}
