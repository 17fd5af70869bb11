package machines

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/host/hostfs"
)

// StaleEpochError refuses a command whose epoch is below the highest this
// host has seen for its session.
type StaleEpochError struct {
	SessionID string
	Got, High int64
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("stale epoch %d for session %s: this host has seen epoch %d", e.Got, e.SessionID, e.High)
}

// HighestEpoch is the highest epoch seen for sid, from the cache or disk.
// Callers hold the session lock (or only read).
func (r *Registry) HighestEpoch(sid string) (int64, error) {
	r.mu.Lock()
	e, ok := r.epochs[sid]
	r.mu.Unlock()
	if ok {
		return e, nil
	}
	b, err := os.ReadFile(filepath.Join(r.cfg.DataDir, epochsDir, sid))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read epoch of session %s: %w", sid, err)
	}
	e, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse epoch of session %s: %w", sid, err)
	}
	r.mu.Lock()
	r.epochs[sid] = e
	r.mu.Unlock()
	return e, nil
}

// Fence refuses epoch if it is below the highest seen for sid and
// durably records it if it is above. Callers hold the session lock.
func (r *Registry) Fence(sid string, epoch int64) error {
	r.markNeeded(sid)
	high, err := r.HighestEpoch(sid)
	if err != nil {
		return err
	}
	if epoch < high {
		return &StaleEpochError{SessionID: sid, Got: epoch, High: high}
	}
	if epoch == high {
		return nil
	}
	if err := hostfs.WriteFileSync(filepath.Join(r.cfg.DataDir, epochsDir), sid, []byte(strconv.FormatInt(epoch, 10)+"\n")); err != nil {
		return fmt.Errorf("persist epoch %d of session %s: %w", epoch, sid, err)
	}
	r.mu.Lock()
	r.epochs[sid] = epoch
	r.mu.Unlock()
	return nil
}

func (r *Registry) markNeeded(sid string) {
	now := r.now()
	r.mu.Lock()
	r.needed[sid] = now
	r.mu.Unlock()
}

// PruneEpochs forgets the epoch records of sessions this host has neither
// run, been told it owns, nor been sent a command for in
// Config.EpochRetention. It lists the epochs dir at most every
// EpochRetention/24. A record met for the first time (after a restart)
// starts its grace period then.
func (r *Registry) PruneEpochs(owned map[string]int64) {
	now := r.now()
	retention := r.cfg.EpochRetention
	r.mu.Lock()
	for sid := range owned {
		r.needed[sid] = now
	}
	for sid := range r.machines {
		r.needed[sid] = now
	}
	for sid := range r.reserved {
		r.needed[sid] = now
	}
	due := now.Sub(r.pruned) >= retention/24
	if due {
		r.pruned = now
	}
	r.mu.Unlock()
	if !due {
		return
	}
	dir := filepath.Join(r.cfg.DataDir, epochsDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("list epoch records", "err", err)
		return
	}
	onDisk := make(map[string]bool, len(entries))
	var removed int
	for _, e := range entries {
		sid := e.Name()
		if e.IsDir() || !hostfs.ValidName(sid) || strings.HasPrefix(sid, ".") {
			continue
		}
		onDisk[sid] = true
		if r.pruneEpoch(dir, sid, now, retention) {
			removed++
		}
	}
	r.mu.Lock()
	for sid, t := range r.needed { // sessions that never got a record
		if !onDisk[sid] && now.Sub(t) >= retention {
			delete(r.needed, sid)
		}
	}
	r.mu.Unlock()
	if removed > 0 {
		r.log.Info("forgot epochs of sessions long gone from this host", "sessions", removed, "retention", retention)
	}
}

// pruneEpoch removes sid's epoch record if its grace has passed.
func (r *Registry) pruneEpoch(dir, sid string, now time.Time, retention time.Duration) bool {
	r.mu.Lock()
	t, seen := r.needed[sid]
	if !seen {
		r.needed[sid] = now
	}
	r.mu.Unlock()
	if !seen || now.Sub(t) < retention {
		return false
	}
	unlock, ok := r.locks.TryLock(sid)
	if !ok {
		return false
	}
	defer unlock()
	r.mu.Lock()
	_, running := r.machines[sid]
	_, booting := r.reserved[sid]
	t = r.needed[sid]
	r.mu.Unlock()
	if running || booting || now.Sub(t) < retention {
		return false
	}
	if err := os.Remove(filepath.Join(dir, sid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("remove epoch record", "session_id", sid, "err", err)
		return false
	}
	r.mu.Lock()
	delete(r.epochs, sid)
	delete(r.needed, sid)
	r.mu.Unlock()
	return true
}
