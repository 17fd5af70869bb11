package qemu

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmmtest"
)

func TestConformance(t *testing.T) {
	testImages(t)
	acquireGuest(t)
	vmmtest.Run(t, vmmtest.Harness{
		New:     func(t *testing.T) vmm.Backend { return newTestBackend(t) },
		Timeout: 3 * time.Minute,
	})
}
