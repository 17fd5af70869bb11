package chunk

import (
	"os"
	"syscall"
	"testing"
)

// allocatedBytes is the disk space the file at path occupies.
func allocatedBytes(t testing.TB, path string) (int64, bool) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Blocks * 512, true
}
