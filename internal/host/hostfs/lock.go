package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrInUse: another process holds the lock LockDir asked for.
var ErrInUse = errors.New("in use by another process")

// maxPIDBytes bounds the read of a holder's pid: the file is ours, but a
// stray large file must not be read whole.
const maxPIDBytes = 32

// LockDir takes an exclusive lock on dir for as long as this process holds
// the returned file open: a flock of dir/name, which also records this
// process's pid for the error another one gets. The kernel releases it when
// the process dies, kill -9 included; children never inherit it (the file
// is close-on-exec). A lock held elsewhere is ErrInUse, naming the pid.
func LockDir(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w (pid %s)", dir, ErrInUse, holder(f))
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// holder is the pid the lock's holder wrote, or "unknown".
func holder(f *os.File) string {
	b := make([]byte, maxPIDBytes)
	n, _ := f.ReadAt(b, 0)
	s := string(bytes.TrimSpace(b[:n]))
	if _, err := strconv.Atoi(s); err != nil {
		return "unknown"
	}
	return s
}
