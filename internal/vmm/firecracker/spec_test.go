package firecracker

import (
	"errors"
	"os"
	"testing"

	"github.com/engrams/engrams/internal/vmm"
)

// TestNormalizeRefusesCallerImages checks Boot and Restore (both normalize
// the spec first) refuse a caller's root filesystem, a harness bundle and a TAP.
func TestNormalizeRefusesCallerImages(t *testing.T) {
	t.Parallel()
	img := &vmm.RootFS{Path: "/img", ID: "sha256:x"}
	tests := []struct {
		name string
		spec vmm.Spec
	}{
		{"rootfs", vmm.Spec{Dir: "/d", RootFS: img}},
		{"harness", vmm.Spec{Dir: "/d", Harness: img}},
		{"network", vmm.Spec{Dir: "/d", Network: &vmm.Network{Tap: os.Stdin}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := normalize(tt.spec); !errors.Is(err, vmm.ErrUnsupported) {
				t.Fatalf("normalize(%s) = %v, want ErrUnsupported", tt.name, err)
			}
		})
	}
	if _, err := normalize(vmm.Spec{Dir: "/d"}); err != nil {
		t.Fatalf("normalize(plain spec) = %v", err)
	}
}
