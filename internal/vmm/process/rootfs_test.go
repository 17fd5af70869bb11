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
// commands on the host's file system, refuses a caller's root filesystem
// and a harness bundle.
func TestRootFSUnsupported(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	if c := b.Capabilities(); c.RootFS || c.Harness || c.Network {
		t.Fatalf("process backend claims Capabilities.RootFS, Harness or Network: %+v", c)
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
	specs := map[string]vmm.Spec{"rootfs": {RootFS: root}, "harness": {Harness: root}, "network": {Network: &vmm.Network{Tap: os.Stdin}}}
	for _, tt := range tests {
		for field, spec := range specs {
			t.Run(tt.name+" "+field, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				spec.SessionID, spec.Dir = field, dir
				m, err := tt.run(spec)
				if m != nil {
					_ = m.Destroy(context.Background())
				}
				if !errors.Is(err, vmm.ErrUnsupported) {
					t.Fatalf("%s with Spec %s = %v, want ErrUnsupported", tt.name, field, err)
				}
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("refused %s left files: %v", tt.name, entries)
				}
			})
		}
	}
}
