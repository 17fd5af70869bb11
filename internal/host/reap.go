package host

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/vmm"
)

// What a restarted agent finds of one machine dir.
type (
	recordState  int
	captureState int
	vmState      int
)

const (
	recordNone       recordState = iota // no machine record: nothing was ever started here
	recordUnreadable                    // a record that cannot be read: no epoch to report
	recordOK
)

const (
	captureNone     captureState = iota
	capturePartial               // a snapshot was in flight: its files are incomplete
	captureComplete              // a complete local capture (snapshots.Local) waits
)

const (
	vmGone     vmState = iota // the backend found nothing to reattach (and reaped what was left)
	vmFailed                  // reattaching kept failing: a machine may still run
	vmAttached                // reattached
)

// found is what is known of one machine dir at start.
type found struct {
	record  recordState
	capture captureState
	vm      vmState // meaningful with recordOK only
	lazy    bool    // its memory was served by the previous agent's pager (snapshots.IsLazy)
}

// recovery is what a restarted agent does with one machine dir.
type recovery int

const (
	forget      recovery = iota // nothing runs: clean the dir
	keepCapture                 // nothing runs, but a complete capture waits: keep it and the record for the retried command
	trackLost                   // a machine may run that could not be reattached: report it exited, reconcile destroys it
	adopt                       // reattached, running or paused as recorded
	adoptPaused                 // reattached, paused by a snapshot whose files are partial: resumed once owned
	adoptHeld                   // reattached, paused with a complete capture: held paused for the retried command
)

func (r recovery) String() string {
	return [...]string{"forget", "keep capture", "track lost", "adopt", "adopt paused", "adopt held"}[r]
}

func captureOf(local *snapshots.Local, partial bool) captureState {
	switch {
	case local != nil:
		return captureComplete
	case partial:
		return capturePartial
	}
	return captureNone
}

func vmOf(err error) vmState {
	switch {
	case err == nil:
		return vmAttached
	case errors.Is(err, vmm.ErrGone):
		return vmGone
	}
	return vmFailed
}

// decideRecovery decides what a restarted agent does with one machine
// dir. A lazily restored machine is never adopted. A capture is complete only if the previous agent marked it so
// after the backend wrote and fsynced every file, and the marker goes
// before any resume, so a complete capture of a reattached machine is
// its paused state exactly.
func decideRecovery(f found) recovery {
	switch {
	case f.record == recordNone:
		return forget // any VMM running here is a stray: reapStrays kills it
	case f.record == recordUnreadable, f.vm == vmFailed:
		return trackLost
	case f.lazy:
		// Its memory lived in the dead agent: pages it never fetched are
		// gone with it, so the VMM is reaped and the session resumes from
		// its last snapshot, like after a host crash.
		return forget
	case f.vm == vmGone && f.capture == captureComplete:
		return keepCapture
	case f.vm == vmGone:
		return forget
	case f.capture == captureComplete:
		return adoptHeld
	case f.capture == capturePartial:
		return adoptPaused
	}
	return adopt
}

// strays picks the VMMs found running that no adopted machine runs on:
// one is kept only if it was started for an adopted machine's dir and
// one of its processes is that machine's (pid and start time: pids
// recycle), or if it runs in the dir of a machine tracked as lost (its
// backend could not reattach it for now: destroying that machine
// reattaches and destroys what runs there). Every other one is reaped,
// whatever its dir.
func strays(running []vmm.VMM, adopted []vmm.Info, tracked []string) []vmm.VMM {
	var out []vmm.VMM
	for _, v := range running {
		if slices.ContainsFunc(tracked, func(d string) bool { return sameDir(d, v.Dir) }) {
			continue
		}
		kept := slices.ContainsFunc(adopted, func(in vmm.Info) bool {
			own := vmm.Process{PID: in.PID, StartTime: in.StartTime}
			return sameDir(in.Dir, v.Dir) && slices.Contains(v.Processes, own)
		})
		if !kept {
			out = append(out, v)
		}
	}
	return out
}

func sameDir(a, b string) bool {
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// reapStrays kills every VMM of this agent's (found by its backend's
// spawn marker under the data dir) that no adopted machine runs on, and
// cleans the machine dir of each unless a machine or a kept capture uses
// it. Backends without vmm.Reaper are skipped: their Recover is all.
func (l *lifecycle) reapStrays(ctx context.Context, adopted []vmm.Info, tracked []string, kept map[string]bool) {
	r, ok := l.backend.(vmm.Reaper)
	if !ok {
		return
	}
	running, err := r.VMMs(ctx, l.reg.Root())
	if err != nil {
		l.log.Error("list this agent's VMM processes; strays are not reaped", "err", err)
		return
	}
	for _, v := range strays(running, adopted, tracked) {
		sid, inMachines := l.reg.SessionOf(v.Dir)
		log := l.log.With("session_id", sid, "dir", v.Dir, "processes", v.Processes)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.Reap(rctx, v)
		cancel()
		if err != nil {
			log.Error("reap a VMM no machine owns", "err", err)
			continue
		}
		log.Warn("reaped a VMM no machine owns (left by a crash before it was recorded or adopted)")
		if inMachines && !kept[l.reg.Dir(sid)] && !slices.ContainsFunc(adopted, func(in vmm.Info) bool { return sameDir(in.Dir, v.Dir) }) {
			if err := machines.CleanDir(l.reg.Dir(sid)); err != nil {
				log.Warn("clean machine dir", "err", err)
			}
		}
	}
}
