package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/vmm"
)

// Recovery retries: a machine the backend cannot reattach (other than
// vmm.ErrGone) is tried this many times before it is tracked as lost.
const (
	recoverAttempts = 3
	recoverBackoff  = 200 * time.Millisecond // doubled after each failure
	// captureHold bounds how long a recovered machine with a complete
	// local capture stays paused waiting for the coordinator's retried
	// command (op retries and a coordinator's op lease take well under a
	// minute); then it is resumed and the capture dropped.
	captureHold = 2 * time.Minute
)

// recoverMachines reattaches the machines a previous agent left running,
// then reaps every VMM of this agent's that none of them runs on.
func (l *lifecycle) recoverMachines(ctx context.Context) error {
	sids, err := l.reg.Sessions()
	if err != nil {
		return err
	}
	var (
		adopted []vmm.Info
		tracked []string
	)
	kept := map[string]bool{}
	for _, sid := range sids {
		switch info, r := l.recoverOne(ctx, sid); r {
		case adopt, adoptPaused, adoptHeld:
			adopted = append(adopted, info)
		case trackLost:
			tracked = append(tracked, l.reg.Dir(sid))
		case keepCapture:
			kept[l.reg.Dir(sid)] = true
		}
	}
	l.reapStrays(ctx, adopted, tracked, kept)
	return nil
}

// recoverOne recovers sid's machine as decideRecovery says and reports
// what it did (with the machine's info when it adopted one).
func (l *lifecycle) recoverOne(ctx context.Context, sid string) (vmm.Info, recovery) {
	log := l.log.With("session_id", sid)
	dir := l.reg.Dir(sid)
	var f found
	rec, err := l.reg.ReadRecord(sid)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.record = recordNone
	case err != nil:
		f.record = recordUnreadable
		log.Error("machine record unreadable", "err", err)
	default:
		f.record = recordOK
	}
	// A snapshot in flight when the previous agent died paused the machine.
	// Complete files are kept for the coordinator's retried command; partial
	// ones go, and the machine is resumed once the coordinator lists it as
	// owned (or destroyed if not) rather than taken as running while its
	// guest cannot answer.
	local, partial := snapshots.FindLocal(dir)
	f.capture = captureOf(local, partial)
	f.lazy = snapshots.IsLazy(dir)
	var m vmm.Machine
	if f.record == recordOK {
		m, err = l.recoverWithRetry(ctx, dir)
		f.vm = vmOf(err)
	}
	r := decideRecovery(f)
	switch r {
	case forget:
		if err := machines.CleanDir(dir); err != nil {
			log.Warn("clean machine dir", "err", err)
		}
		if f.record == recordOK {
			log.Info("machine gone after agent restart; forgetting it", "reason", err)
		}
	case keepCapture:
		if err := machines.CleanDir(dir, append(snapshots.LocalKeep(*local), machines.RecordFile)...); err != nil {
			log.Warn("clean machine dir", "err", err)
		}
		log.Warn("machine gone after agent restart; keeping its complete local snapshot for the retried capture",
			"snapshot_id", local.SnapshotID, "reason", err)
	case trackLost:
		log.Error("machine not recovered; tracking it as exited so reconciliation destroys it", "epoch", rec.Epoch, "err", err)
		l.trackLost(sid, rec)
	default:
		l.adopt(log, sid, rec, l.rejoinNetwork(ctx, log, sid, rec.Spec(), m), r, local)
		return m.Info(), r
	}
	return vmm.Info{}, r
}

// adopt publishes a reattached machine: paused if it was recorded paused
// or a snapshot was in flight, held paused if that snapshot is complete.
func (l *lifecycle) adopt(log *slog.Logger, sid string, rec machines.Record, m vmm.Machine, r recovery, local *snapshots.Local) {
	mc := l.publish(sid, rec.Epoch, rec.Spec(), m)
	mc.MarkPaused(rec.Paused || r != adopt)
	attrs := []any{"epoch", rec.Epoch, "pid", m.Info().PID, "paused", rec.Paused || r != adopt, "snapshot_in_flight", r != adopt}
	if r == adoptHeld {
		mc.Hold(l.now().Add(captureHold))
		attrs = append(attrs, "complete_snapshot", local.SnapshotID, "held_for", captureHold)
	}
	log.Info("machine recovered", attrs...)
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
