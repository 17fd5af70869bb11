package host

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
)

// reconcile converges on what the coordinator says this host owns:
// machines not owned are destroyed; an owned machine listed at a higher
// epoch than it runs is kept and the epoch recorded (an op claim bumped it,
// so older commands are fenced); a paused owned machine is resumed if the
// lease allows. Machines started after gen (the request that returned
// owned was sent) are left alone: the answer predates them. A session
// whose lock is held (a snapshot or restore in flight) is skipped: the next
// heartbeat repeats the list, and the heartbeat loop never waits on it.
func (l *lifecycle) reconcile(ctx context.Context, owned []hostlink.Ownership, gen uint64) {
	want := make(map[string]int64, len(owned))
	for _, o := range owned {
		want[o.SessionID] = max(want[o.SessionID], o.Epoch)
	}
	var todo []string
	for _, mc := range l.reg.Machines() {
		if mc.Gen() > gen {
			continue
		}
		epoch, _, paused := mc.State()
		if e, ok := want[mc.SessionID()]; !ok || e > epoch || paused {
			todo = append(todo, mc.SessionID())
		}
	}
	for _, sid := range todo {
		l.reconcileOne(ctx, sid, want, gen)
	}
	l.reg.PruneEpochs(want)
	l.snaps.PruneAnswers(want)
	l.pruneKeptCaptures(want)
}

// pruneKeptCaptures removes the complete local captures kept for sessions
// whose machine is gone (recoverOne: keepCapture) once the coordinator no
// longer lists them as owned: no retried command will ask for them.
func (l *lifecycle) pruneKeptCaptures(want map[string]int64) {
	sids, err := l.reg.Sessions()
	if err != nil {
		return
	}
	for _, sid := range sids {
		if _, owned := want[sid]; owned || l.reg.Get(sid) != nil {
			continue
		}
		unlock, ok := l.reg.TryLock(sid)
		if !ok {
			continue
		}
		if l.reg.Get(sid) == nil {
			if local, _ := snapshots.FindLocal(l.reg.Dir(sid)); local != nil {
				l.log.Info("dropping a kept local snapshot: the session is no longer owned", "session_id", sid, "snapshot_id", local.SnapshotID)
				_ = machines.CleanDir(l.reg.Dir(sid))
			}
		}
		unlock()
	}
}

func (l *lifecycle) reconcileOne(ctx context.Context, sid string, want map[string]int64, gen uint64) {
	unlock, ok := l.reg.TryLock(sid)
	if !ok {
		return
	}
	defer unlock()
	mc := l.reg.Get(sid)
	if mc == nil || mc.Gen() > gen { // changed while we looked
		return
	}
	e, owned := want[sid]
	if !owned {
		if err := l.destroy(ctx, sid, "not owned by this host"); err != nil {
			l.log.Error("reconcile ownership", "session_id", sid, "err", err)
		}
		return
	}
	if err := l.reg.AdoptEpoch(mc, e); err != nil {
		l.log.Warn("record owned epoch", "session_id", sid, "epoch", e, "err", err)
		return
	}
	if _, exited, paused := mc.State(); paused && !exited && !mc.Held(l.now()) {
		l.resumeLocked(ctx, mc, "coordinator confirmed ownership")
	}
}

// pauseAll pauses every running machine. A session whose lock is held is
// skipped this round: its operation was cancelled with the lease and
// releases the lock soon.
func (l *lifecycle) pauseAll(ctx context.Context) {
	var sids []string
	for _, mc := range l.reg.Machines() {
		if _, exited, paused := mc.State(); !exited && !paused {
			sids = append(sids, mc.SessionID())
		}
	}
	for _, sid := range sids {
		unlock, ok := l.reg.TryLock(sid)
		if !ok {
			continue
		}
		if mc := l.reg.Get(sid); mc != nil && l.lease.Expired() {
			l.pauseLocked(ctx, mc, "lease expired")
		}
		unlock()
	}
}

// pauseLocked pauses mc and reports it paused. A machine that cannot be
// paused is destroyed (it must stop writing) and reported exited. Callers
// hold the session lock.
func (l *lifecycle) pauseLocked(ctx context.Context, mc *machines.Machine, reason string) {
	epoch, exited, paused := mc.State()
	if exited || paused {
		return
	}
	log := l.log.With("session_id", mc.SessionID(), "epoch", epoch)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.VM().Pause(ctx); err != nil {
		log.Error("cannot pause machine; destroying it so it stops writing", "reason", reason, "err", err)
		if err := mc.VM().Destroy(ctx); err != nil {
			log.Error("cannot destroy unpausable machine; retrying", "err", err)
			return
		}
		mc.MarkExited()
		return
	}
	l.reg.SetPaused(mc, true)
	log.Warn("machine paused", "reason", reason)
}

// resumeLocked resumes a paused mc if at least half the lease is left (an
// answer to a heartbeat sent long ago does not make machines flap).
// Callers hold the session lock.
func (l *lifecycle) resumeLocked(ctx context.Context, mc *machines.Machine, reason string) {
	if !l.lease.fresh() {
		return
	}
	// A complete local capture of the paused machine shares storage with
	// it (QEMU's memory): it goes first, and with it any hold.
	if err := snapshots.DropLocal(l.reg.Dir(mc.SessionID())); err != nil {
		l.log.Error("remove the local snapshot of a paused machine; retrying at the next heartbeat", "session_id", mc.SessionID(), "err", err)
		return
	}
	mc.Hold(time.Time{})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.VM().Resume(ctx); err != nil {
		l.log.Error("resume machine; retrying at the next heartbeat", "session_id", mc.SessionID(), "err", err)
		return
	}
	l.reg.SetPaused(mc, false)
	l.log.Info("machine resumed", "session_id", mc.SessionID(), "reason", reason)
}
