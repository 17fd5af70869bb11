package initproto

import (
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

func TestHarnessDirIsHarnessMountPoint(t *testing.T) {
	t.Parallel()
	if HarnessDir != guestapi.HarnessMountPoint || HarnessFSType != guestapi.HarnessFSType {
		t.Fatalf("init mounts %s (%s), harness bundles expect %s (%s)", HarnessDir, HarnessFSType, guestapi.HarnessMountPoint, guestapi.HarnessFSType)
	}
}
