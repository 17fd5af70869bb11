package vmnet

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks no test leaves a goroutine behind (a namespace switch,
// a TAP reader).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
