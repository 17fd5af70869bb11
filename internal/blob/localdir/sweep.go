package localdir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Sweep removes temp files that crashed Puts left behind: those not locked
// by a live Put (in any process sharing the directory) and last written
// more than olderThan ago. The age guards the instant between a Put
// creating its temp file and locking it. It returns how many it removed.
func (s *Store) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return 0, fmt.Errorf("sweep temp files: %w", err)
	}
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("sweep temp files: %w", err)
		}
		ok, err := s.sweepOne(filepath.Join(s.tmp, e.Name()), cutoff)
		if err != nil {
			return removed, fmt.Errorf("sweep temp files: %w", err)
		}
		if ok {
			removed++
		}
	}
	if removed > 0 {
		s.log.Info("removed temp files of interrupted puts", "count", removed)
	}
	return removed, nil
}

func (s *Store) sweepOne(path string, cutoff time.Time) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if fi.IsDir() || fi.ModTime().After(cutoff) {
		return false, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // renamed into place meanwhile
		}
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil // a live Put holds it
		}
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
