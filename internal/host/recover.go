package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/vmm"
)

// Recovery retries: a machine the backend cannot reattach (other than
// vmm.ErrGone) is tried this many times before it is tracked as lost.
const (
	recoverAttempts = 3
	recoverBackoff  = 200 * time.Millisecond // doubled after each failure
)

// recoverMachines reattaches the machines a previous agent left running.
func (l *lifecycle) recoverMachines(ctx context.Context) error {
	sids, err := l.reg.Sessions()
	if err != nil {
		return err
	}
	for _, sid := range sids {
		l.recoverOne(ctx, sid)
	}
	return nil
}

func (l *lifecycle) recoverOne(ctx context.Context, sid string) {
	log := l.log.With("session_id", sid)
	dir := l.reg.Dir(sid)
	rec, err := l.reg.ReadRecord(sid)
	if errors.Is(err, os.ErrNotExist) {
		// Nothing was ever booted here (or it was destroyed); keep snapshots.
		if err := machines.CleanDir(dir); err != nil {
			log.Warn("clean machine dir", "err", err)
		}
		return
	}
	if err != nil {
		// Without a record there is no epoch to report; the backend may
		// still hold a machine: track it as lost so reconcile destroys it.
		log.Error("machine record unreadable; tracking the machine as exited until reconciled", "err", err)
		l.trackLost(sid, rec)
		return
	}
	// A snapshot in flight when the previous agent died may have paused the
	// machine: count it paused, so it is resumed once the coordinator lists
	// it as owned (or destroyed if not) rather than taken as running while
	// its guest cannot answer.
	inFlight := removeSnapshotTemps(dir, log)
	m, err := l.recoverWithRetry(ctx, dir)
	if errors.Is(err, vmm.ErrGone) {
		log.Info("machine gone after agent restart; forgetting it")
		if err := machines.CleanDir(dir); err != nil {
			log.Warn("clean machine dir", "err", err)
		}
		return
	}
	if err != nil {
		log.Error("machine not recovered; tracking it as exited so reconciliation destroys it", "epoch", rec.Epoch, "err", err)
		l.trackLost(sid, rec)
		return
	}
	mc := l.publish(sid, rec.Epoch, rec.Spec(), m)
	mc.MarkPaused(rec.Paused || inFlight)
	log.Info("machine recovered", "epoch", rec.Epoch, "pid", m.Info().PID, "paused", rec.Paused, "snapshot_in_flight", inFlight)
}

// recoverWithRetry calls Backend.Recover until it succeeds, answers
// vmm.ErrGone, or fails recoverAttempts times.
func (l *lifecycle) recoverWithRetry(ctx context.Context, dir string) (vmm.Machine, error) {
	wait := recoverBackoff
	var err error
	for attempt := 1; ; attempt++ {
		var m vmm.Machine
		m, err = l.backend.Recover(ctx, dir)
		if err == nil || errors.Is(err, vmm.ErrGone) || attempt == recoverAttempts {
			return m, err
		}
		l.log.Warn("recover machine failed; retrying", "dir", dir, "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("recover machine in %s: %w (then %w)", dir, err, ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// trackLost keeps a machine that could not be reattached in the table as
// exited: the coordinator sees it, and destroying it (reconcile, or a
// start of the session) retries the backend's Recover and destroys what it
// finds.
func (l *lifecycle) trackLost(sid string, rec machines.Record) {
	lm := &lostMachine{backend: l.backend, info: vmm.Info{SessionID: sid, Dir: l.reg.Dir(sid)}, done: make(chan struct{})}
	close(lm.done)
	mc := l.publish(sid, rec.Epoch, rec.Spec(), lm)
	mc.MarkExited()
}

// removeSnapshotTemps removes snapshot files an interrupted snapshot left
// and reports whether there were any.
func removeSnapshotTemps(dir string, log *slog.Logger) (found bool) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), snapshotTempPrefix) {
			found = true
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				log.Warn("remove leftover snapshot files", "err", err)
			}
		}
	}
	return found
}

// lostMachine stands for a machine the backend could not reattach.
type lostMachine struct {
	backend vmm.Backend
	info    vmm.Info
	done    chan struct{}
}

func (l *lostMachine) Info() vmm.Info { return l.info }

func (l *lostMachine) Dial(context.Context) (net.Conn, error) {
	return nil, fmt.Errorf("dial guest of session %s: machine not reattached", l.info.SessionID)
}

func (l *lostMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, fmt.Errorf("snapshot session %s: machine not reattached: %w", l.info.SessionID, vmm.ErrUnsupported)
}

func (l *lostMachine) Pause(context.Context) error {
	return fmt.Errorf("pause session %s: machine not reattached", l.info.SessionID)
}

func (l *lostMachine) Resume(context.Context) error {
	return fmt.Errorf("resume session %s: machine not reattached", l.info.SessionID)
}

// Destroy reattaches once more and destroys what it finds.
func (l *lostMachine) Destroy(ctx context.Context) error {
	m, err := l.backend.Recover(ctx, l.info.Dir)
	if errors.Is(err, vmm.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy unreattached machine of session %s: %w", l.info.SessionID, err)
	}
	if err := m.Destroy(ctx); err != nil {
		return fmt.Errorf("destroy reattached machine of session %s: %w", l.info.SessionID, err)
	}
	return nil
}

func (l *lostMachine) Done() <-chan struct{} { return l.done }
