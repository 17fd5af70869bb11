package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/host/hostfs"
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

// lease is the host's self-fencing lease.
type lease struct {
	dataDir  string
	log      *slog.Logger
	now      func() time.Time
	machines func() int    // how many machines the host has, for the log
	kick     chan struct{} // wakes run

	mu      sync.Mutex
	dur     time.Duration // 0: the coordinator named none, no self-fencing
	renewed time.Time     // when the last answered register or heartbeat was sent
	expired bool
	paused  bool            // this expiry was logged with machines to pause
	idle    bool            // this expiry was logged with nothing to pause
	ctx     context.Context // cancelled when the lease expires; replaced on renewal
	cancel  context.CancelCauseFunc
}

// leaseRecord is persisted so a restarted agent knows whether its
// predecessor's lease already ran out.
type leaseRecord struct {
	Lease   time.Duration `json:"lease_ns"`
	Renewed time.Time     `json:"renewed"`
}

func newLease(dataDir string, log *slog.Logger, now func() time.Time, machines func() int) *lease {
	l := &lease{dataDir: dataDir, log: log, now: now, machines: machines, kick: make(chan struct{}, 1)}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	return l
}

// load reads the lease a previous agent left; a missing or unreadable
// file means no lease (the first answer names one).
func (l *lease) load() {
	b, err := os.ReadFile(filepath.Join(l.dataDir, leaseFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var rec leaseRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		l.log.Warn("lease record unreadable; waiting for the coordinator to name a lease", "err", err)
		return
	}
	l.mu.Lock()
	l.dur, l.renewed = rec.Lease, rec.Renewed
	l.mu.Unlock()
}

// renew records an answered register or heartbeat sent at sent; dur is
// the lease the answer named.
func (l *lease) renew(sent time.Time, dur time.Duration) {
	now := l.now()
	l.mu.Lock()
	if sent.After(l.renewed) {
		l.renewed = sent
	}
	l.dur = max(dur, 0)
	ended := l.expired && l.validLocked(now)
	paused := ended && l.paused
	if ended {
		l.expired, l.paused, l.idle = false, false, false
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
	}
	rec := leaseRecord{Lease: l.dur, Renewed: l.renewed}
	l.mu.Unlock()
	l.log.Debug("lease renew", "sent", sent.UTC().Format(time.RFC3339Nano), "lease", dur, "ended", ended)
	switch {
	case paused:
		l.log.Warn("lease renewed: the coordinator answers again; owned machines resume")
	case ended:
		l.log.Info("lease renewed: the coordinator answers again")
	}
	if b, err := json.Marshal(rec); err == nil {
		if err := hostfs.WriteFileSync(l.dataDir, leaseFile, b); err != nil {
			l.log.Warn("persist lease", "err", err)
		}
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *lease) validLocked(now time.Time) bool {
	return l.dur <= 0 || now.Before(l.renewed.Add(l.dur))
}

// Expired reports whether this host must not let its machines run.
func (l *lease) Expired() bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.validLocked(now)
}

// fresh reports whether at least half the lease is left.
func (l *lease) fresh() bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dur <= 0 || now.Before(l.renewed.Add(l.dur/2))
}

// Err describes an expired lease for an answer to the coordinator.
func (l *lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Errorf("this host's lease expired (no answered heartbeat since %s, lease %s): its machines are paused until the coordinator confirms ownership",
		l.renewed.UTC().Format(time.RFC3339Nano), l.dur)
}

// OpContext derives the context of a session operation: it ends with
// parent or when the lease expires.
func (l *lease) OpContext(parent context.Context) (context.Context, context.CancelFunc) {
	l.mu.Lock()
	lc := l.ctx
	l.mu.Unlock()
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(lc, func() { cancel(context.Cause(lc)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// run calls pauseAll while the lease is expired, until ctx ends.
func (l *lease) run(ctx context.Context, pauseAll func(context.Context)) error {
	for {
		t := time.NewTimer(l.check(ctx, pauseAll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-l.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// check acts on the lease and returns when to look again.
func (l *lease) check(ctx context.Context, pauseAll func(context.Context)) time.Duration {
	now := l.now()
	l.mu.Lock()
	if l.dur <= 0 {
		l.mu.Unlock()
		return noLeaseRecall
	}
	if left := l.renewed.Add(l.dur).Sub(now); left > 0 {
		l.mu.Unlock()
		return left
	}
	first := !l.expired
	if first {
		l.expired = true
		l.cancel(errLeaseExpired)
	}
	dur := l.dur
	l.mu.Unlock()
	l.tell()
	pauseAll(ctx)
	return min(dur/4, leaseRecheck)
}

// tell logs an expired lease once: an ERROR when there are machines to
// pause (a host cut off from its coordinator), an INFO while there are none
// (an agent restarted after its predecessor's lease ran out, or an empty
// host) and then an ERROR if machines appear before the lease is renewed.
func (l *lease) tell() {
	n := l.machines()
	l.mu.Lock()
	pause := n > 0 && !l.paused
	idle := n == 0 && !l.paused && !l.idle
	l.paused, l.idle = l.paused || pause, l.idle || idle
	dur, last := l.dur, l.renewed.UTC().Format(time.RFC3339Nano)
	l.mu.Unlock()
	switch {
	case pause:
		l.log.Error("LEASE EXPIRED: no answered heartbeat within the lease; pausing every machine so no session is live on two hosts",
			"lease", dur, "last_heartbeat", last, "machines", n)
	case idle:
		l.log.Info("lease expired: no answered heartbeat within the lease; no machine to pause, waiting for the coordinator",
			"lease", dur, "last_heartbeat", last)
	}
}
