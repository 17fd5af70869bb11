//go:build !linux

package chunk

import "testing"

func allocatedBytes(testing.TB, string) (int64, bool) { return 0, false }
