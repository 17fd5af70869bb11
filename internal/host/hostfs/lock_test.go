package hostfs

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLockDirIsExclusiveUntilClosed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := LockDir(dir, "agent.lock")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockDir(dir, "agent.lock")
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second lock: %v, want ErrInUse", err)
	}
	if want := "pid " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("second lock: %q does not name the holder (%s)", err, want)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := LockDir(dir, "agent.lock")
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	_ = g.Close()
}
