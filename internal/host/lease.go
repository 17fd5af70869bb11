package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Self-fencing (DESIGN reliability rule 4). The coordinator names a lease
// in every register and heartbeat answer; it is shorter than the
// coordinator's HostLostAfter. A host with no answered register or
// heartbeat for the lease pauses every machine (it stops writing before
// its sessions can move elsewhere) and cancels every session operation in
// flight. Once an answer lists a paused machine as owned, reconcile
// resumes it; a machine no longer owned is destroyed.

const (
	leaseFile     = "lease.json"
	leaseRecheck  = 250 * time.Millisecond // while expired: pause what is still running
	controlLimit  = 30 * time.Second       // one Pause, Resume or Destroy
	noLeaseRecall = time.Hour              // no lease named: look again when kicked or after this
)

// errLeaseExpired cancels session operations when the lease expires.
var errLeaseExpired = errors.New("host lease expired: no answered heartbeat")

// leaseState is guarded by Agent.mu.
type leaseState struct {
	dur     time.Duration // 0: the coordinator named none, no self-fencing
	renewed time.Time     // when the last answered register or heartbeat was sent
	expired bool
	ctx     context.Context // cancelled when the lease expires; replaced on renewal
	cancel  context.CancelCauseFunc
}

// leaseRecord is persisted so a restarted agent knows whether its
// predecessor's lease already ran out.
type leaseRecord struct {
	Lease   time.Duration `json:"lease_ns"`
	Renewed time.Time     `json:"renewed"`
}

// loadLease reads the lease a previous agent left; a missing or unreadable
// file means no lease (the first answer names one).
func (a *Agent) loadLease() {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, leaseFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var rec leaseRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		a.log.Warn("lease record unreadable; waiting for the coordinator to name a lease", "error", err)
		return
	}
	a.mu.Lock()
	a.lease.dur, a.lease.renewed = rec.Lease, rec.Renewed
	a.mu.Unlock()
}

// renewLease records an answered register or heartbeat sent at sent; lease
// is the duration the answer named.
func (a *Agent) renewLease(sent time.Time, lease time.Duration) {
	now := a.deps.Now()
	a.mu.Lock()
	if sent.After(a.lease.renewed) {
		a.lease.renewed = sent
	}
	a.lease.dur = max(lease, 0)
	ended := a.lease.expired && a.leaseValidLocked(now)
	if ended {
		a.lease.expired = false
		a.lease.ctx, a.lease.cancel = context.WithCancelCause(context.Background())
	}
	rec := leaseRecord{Lease: a.lease.dur, Renewed: a.lease.renewed}
	a.mu.Unlock()
	a.log.Debug("lease renew", "sent", sent.UTC().Format(time.RFC3339Nano), "lease", lease, "ended", ended)
	if ended {
		a.log.Warn("lease renewed: the coordinator answers again; owned machines resume")
	}
	if b, err := json.Marshal(rec); err == nil {
		if err := writeFileSync(a.cfg.DataDir, leaseFile, b); err != nil {
			a.log.Warn("persist lease", "error", err)
		}
	}
	a.kickLease()
}

func (a *Agent) kickLease() {
	select {
	case a.leaseKick <- struct{}{}:
	default:
	}
}

func (a *Agent) leaseValidLocked(now time.Time) bool {
	return a.lease.dur <= 0 || now.Before(a.lease.renewed.Add(a.lease.dur))
}

// leaseExpired reports whether this host must not let its machines run.
func (a *Agent) leaseExpired() bool {
	now := a.deps.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.leaseValidLocked(now)
}

// leaseFresh reports whether at least half the lease is left.
func (a *Agent) leaseFresh() bool {
	now := a.deps.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease.dur <= 0 || now.Before(a.lease.renewed.Add(a.lease.dur/2))
}

// leaseError describes an expired lease for an answer to the coordinator.
func (a *Agent) leaseError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Errorf("this host's lease expired (no answered heartbeat since %s, lease %s): its machines are paused until the coordinator confirms ownership",
		a.lease.renewed.UTC().Format(time.RFC3339Nano), a.lease.dur)
}

// opContext derives the context of a session operation: it ends with
// parent or when the lease expires.
func (a *Agent) opContext(parent context.Context) (context.Context, context.CancelFunc) {
	a.mu.Lock()
	lc := a.lease.ctx
	a.mu.Unlock()
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(lc, func() { cancel(context.Cause(lc)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// watchLease pauses every machine while the lease is expired.
func (a *Agent) watchLease(ctx context.Context) {
	for {
		t := time.NewTimer(a.checkLease(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.leaseKick:
			t.Stop()
		case <-t.C:
		}
	}
}

// checkLease acts on the lease and returns when to look again.
func (a *Agent) checkLease(ctx context.Context) time.Duration {
	now := a.deps.Now()
	a.mu.Lock()
	if a.lease.dur <= 0 {
		a.mu.Unlock()
		return noLeaseRecall
	}
	if left := a.lease.renewed.Add(a.lease.dur).Sub(now); left > 0 {
		a.mu.Unlock()
		return left
	}
	first := !a.lease.expired
	if first {
		a.lease.expired = true
		a.lease.cancel(errLeaseExpired)
	}
	dur, renewed := a.lease.dur, a.lease.renewed
	a.mu.Unlock()
	if first {
		a.log.Error("LEASE EXPIRED: no answered heartbeat within the lease; pausing every machine so no session is live on two hosts",
			"lease", dur, "last_heartbeat", renewed.UTC().Format(time.RFC3339Nano), "machines", a.machineCount())
	}
	a.pauseAll(ctx)
	return min(dur/4, leaseRecheck)
}

// pauseAll pauses every running machine. A session whose lock is held is
// skipped this round: its operation was cancelled with the lease and
// releases the lock soon.
func (a *Agent) pauseAll(ctx context.Context) {
	a.mu.Lock()
	var sids []string
	for sid, mc := range a.machines {
		if !mc.exited && !mc.paused {
			sids = append(sids, sid)
		}
	}
	a.mu.Unlock()
	for _, sid := range sids {
		unlock, ok := a.locks.tryLock(sid)
		if !ok {
			continue
		}
		a.mu.Lock()
		mc := a.machines[sid]
		a.mu.Unlock()
		if mc != nil && a.leaseExpired() {
			a.pauseLocked(ctx, mc, "lease expired")
		}
		unlock()
	}
}

// pauseLocked pauses mc and reports it paused. A machine that cannot be
// paused is destroyed (it must stop writing) and reported exited. Callers
// hold the session lock.
func (a *Agent) pauseLocked(ctx context.Context, mc *machine, reason string) {
	a.mu.Lock()
	skip, epoch := mc.exited || mc.paused, mc.epoch
	a.mu.Unlock()
	if skip {
		return
	}
	log := a.log.With("session_id", mc.sessionID, "epoch", epoch)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.m.Pause(ctx); err != nil {
		log.Error("cannot pause machine; destroying it so it stops writing", "reason", reason, "error", err)
		if err := mc.m.Destroy(ctx); err != nil {
			log.Error("cannot destroy unpausable machine; retrying", "error", err)
			return
		}
		a.mu.Lock()
		mc.exited = true
		a.mu.Unlock()
		return
	}
	a.setPaused(mc, true)
	log.Warn("machine paused", "reason", reason)
}

// resumeLocked resumes a paused mc if at least half the lease is left (an
// answer to a heartbeat sent long ago does not make machines flap).
// Callers hold the session lock.
func (a *Agent) resumeLocked(ctx context.Context, mc *machine, reason string) {
	if !a.leaseFresh() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.m.Resume(ctx); err != nil {
		a.log.Error("resume machine; retrying at the next heartbeat", "session_id", mc.sessionID, "error", err)
		return
	}
	a.setPaused(mc, false)
	a.log.Info("machine resumed", "session_id", mc.sessionID, "reason", reason)
}

// setPaused records mc's pause state, also on disk so a restarted agent
// knows which machines it paused.
func (a *Agent) setPaused(mc *machine, paused bool) {
	a.mu.Lock()
	mc.paused = paused
	epoch, spec := mc.epoch, mc.spec
	a.mu.Unlock()
	if err := a.writeRecord(mc.sessionID, epoch, spec, paused); err != nil {
		a.log.Warn("record machine pause state", "session_id", mc.sessionID, "error", err)
	}
}
