package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// highestEpoch is the highest epoch seen for sid, from the cache or disk.
// Callers hold the session lock.
func (a *Agent) highestEpoch(sid string) (int64, error) {
	a.mu.Lock()
	e, ok := a.epochs[sid]
	a.mu.Unlock()
	if ok {
		return e, nil
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, epochsDir, sid))
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
	a.mu.Lock()
	a.epochs[sid] = e
	a.mu.Unlock()
	return e, nil
}

// fence refuses epoch if it is below the highest seen for sid and
// durably records it if it is above. Callers hold the session lock.
func (a *Agent) fence(sid string, epoch int64) error {
	a.markNeeded(sid)
	high, err := a.highestEpoch(sid)
	if err != nil {
		return err
	}
	if epoch < high {
		return &staleEpochError{sid: sid, got: epoch, high: high}
	}
	if epoch == high {
		return nil
	}
	if err := writeFileSync(filepath.Join(a.cfg.DataDir, epochsDir), sid, []byte(strconv.FormatInt(epoch, 10)+"\n")); err != nil {
		return fmt.Errorf("persist epoch %d of session %s: %w", epoch, sid, err)
	}
	a.mu.Lock()
	a.epochs[sid] = epoch
	a.mu.Unlock()
	return nil
}

type staleEpochError struct {
	sid       string
	got, high int64
}

func (e *staleEpochError) Error() string {
	return fmt.Sprintf("stale epoch %d for session %s: this host has seen epoch %d", e.got, e.sid, e.high)
}

func (a *Agent) markNeeded(sid string) {
	now := a.deps.Now()
	a.mu.Lock()
	a.needed[sid] = now
	a.mu.Unlock()
}

// pruneEpochs forgets the epoch records of sessions this host has neither
// run, been told it owns, nor been sent a command for in
// Config.EpochRetention. It lists the epochs dir at most every
// EpochRetention/24. A record met for the first time (after a restart)
// starts its grace period then.
func (a *Agent) pruneEpochs(owned map[string]int64) {
	now := a.deps.Now()
	retention := a.cfg.EpochRetention
	a.mu.Lock()
	for sid := range owned {
		a.needed[sid] = now
	}
	for sid := range a.machines {
		a.needed[sid] = now
	}
	for sid := range a.reserved {
		a.needed[sid] = now
	}
	due := now.Sub(a.pruned) >= retention/24
	if due {
		a.pruned = now
	}
	a.mu.Unlock()
	if !due {
		return
	}
	dir := filepath.Join(a.cfg.DataDir, epochsDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("list epoch records", "error", err)
		return
	}
	onDisk := make(map[string]bool, len(entries))
	var removed int
	for _, e := range entries {
		sid := e.Name()
		if e.IsDir() || !validSessionID(sid) || strings.HasPrefix(sid, ".") {
			continue
		}
		onDisk[sid] = true
		if a.pruneEpoch(dir, sid, now, retention) {
			removed++
		}
	}
	a.mu.Lock()
	for sid, t := range a.needed { // sessions that never got a record
		if !onDisk[sid] && now.Sub(t) >= retention {
			delete(a.needed, sid)
		}
	}
	a.mu.Unlock()
	if removed > 0 {
		a.log.Info("forgot epochs of sessions long gone from this host", "sessions", removed, "retention", retention)
	}
}

// pruneEpoch removes sid's epoch record if its grace has passed.
func (a *Agent) pruneEpoch(dir, sid string, now time.Time, retention time.Duration) bool {
	a.mu.Lock()
	t, seen := a.needed[sid]
	if !seen {
		a.needed[sid] = now
	}
	a.mu.Unlock()
	if !seen || now.Sub(t) < retention {
		return false
	}
	unlock, ok := a.locks.tryLock(sid)
	if !ok {
		return false
	}
	defer unlock()
	a.mu.Lock()
	_, running := a.machines[sid]
	_, booting := a.reserved[sid]
	t = a.needed[sid]
	a.mu.Unlock()
	if running || booting || now.Sub(t) < retention {
		return false
	}
	if err := os.Remove(filepath.Join(dir, sid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("remove epoch record", "session_id", sid, "error", err)
		return false
	}
	a.mu.Lock()
	delete(a.epochs, sid)
	delete(a.needed, sid)
	a.mu.Unlock()
	return true
}
