package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

// errFenced means a newer op took the session; the current op stops quietly.
var errFenced = errors.New("fenced by a newer op")

// errTransient marks a failure worth retrying (database or link trouble):
// the op is left claimed with a short lease, so a worker reclaims it (with
// a newer epoch) after a backoff. Ops give up after maxAttempts.
var errTransient = errors.New("transient failure")

// maxAttempts bounds how often one op is claimed before it gives up.
const maxAttempts = 6

func transient(err error) error { return fmt.Errorf("%w: %w", errTransient, err) }

// workLoop claims and runs ops until ctx ends. Idle workers wake on the ops
// topic, and every second anyway to reclaim ops whose lease expired.
func (c *Coordinator) workLoop(ctx context.Context, n int) {
	sub := c.st.Subscribe(ctx, TopicOps)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	claimer := fmt.Sprintf("%s/%d", c.cfg.ReplicaID, n)
	for ctx.Err() == nil {
		op, s, err := c.st.ClaimOp(ctx, claimer, c.now(), c.cfg.OpLease)
		switch {
		case errors.Is(err, store.ErrNoOp):
			select {
			case <-ctx.Done():
			case <-sub:
			case <-tick.C:
			}
			continue
		case err != nil:
			if ctx.Err() == nil {
				c.log.Error("claim op", "err", err)
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
			continue
		}
		c.runOp(ctx, op, s)
	}
}

// runOp runs one claimed op under a lease that is renewed while it runs.
func (c *Coordinator) runOp(ctx context.Context, op domain.Op, s domain.Session) {
	log := c.log.With("session_id", s.ID, "op_id", op.ID, "op_kind", op.Kind, "epoch", op.Epoch)
	opCtx, cancel := context.WithCancel(ctx)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		c.renewLease(opCtx, cancel, op, log)
	}()
	x := &opRun{c: c, op: op, s: s, log: log}
	started := c.now()
	err := x.run(opCtx)
	cancel()
	<-renewDone
	outcome := func(o string) { c.met.OpFinished(string(op.Kind), o, c.now().Sub(started)) }

	state, msg := domain.OpSucceeded, ""
	if err != nil {
		state, msg = domain.OpFailed, err.Error()
	}
	switch {
	case errors.Is(err, errFenced) || errors.Is(err, store.ErrStaleEpoch) ||
		(ctx.Err() == nil && errors.Is(err, context.Canceled)): // renewLease saw a newer op
		log.Info("op fenced by a newer op", "err", err)
		outcome("fenced")
		return // the newer op owns the session; our FinishOp would be stale anyway
	case errors.Is(err, errQueued):
		// Waiting for room: hand the op back without holding a worker (the
		// suspends that make room need one) nor spending an attempt.
		if rerr := c.st.DeferOp(context.WithoutCancel(ctx), op.ID, op.Epoch, c.now().Add(queueRecheck)); rerr != nil {
			log.Warn("defer op waiting for room", "err", rerr)
		}
		return
	case errors.Is(err, errTransient) && (op.Attempts < maxAttempts || op.Kind == domain.OpResume):
		// Leave it claimed with a short lease: another claim retries it. A
		// resume never gives up on its host (see opRun.resume); a lost host
		// hands it to a recover op instead.
		backoff := min(time.Duration(op.Attempts)*time.Second, 10*time.Second)
		log.Warn("op will be retried", "attempt", op.Attempts, "in", backoff, "err", err)
		outcome("retried")
		if rerr := c.st.RenewOp(context.WithoutCancel(ctx), op.ID, op.Epoch, c.now().Add(backoff)); rerr != nil {
			log.Warn("shorten op lease", "err", rerr)
		}
		return
	case err == nil:
		log.Info("op done")
		outcome("succeeded")
	case ctx.Err() != nil:
		outcome("retried")
		return // shutting down: the lease expires and another worker resumes the op
	default:
		log.Warn("op failed", "err", err)
		outcome("failed")
	}
	// A finished op is recorded even when shutdown began meanwhile.
	switch err := c.st.FinishOp(context.WithoutCancel(ctx), op.ID, op.Epoch, state, msg, c.now()); {
	case err == nil, errors.Is(err, store.ErrStaleEpoch):
	case errors.Is(err, store.ErrConflict): // superseded meanwhile (a delete): its outcome no longer matters
		log.Info("finish op: superseded", "err", err)
	default:
		log.Error("finish op", "err", err)
	}
	c.wake(ctx, SessionTopic(s.ID))
}

func (c *Coordinator) renewLease(ctx context.Context, cancel context.CancelFunc, op domain.Op, log *slog.Logger) {
	t := time.NewTicker(c.cfg.OpLease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := c.st.RenewOp(ctx, op.ID, op.Epoch, c.now().Add(c.cfg.OpLease))
			if errors.Is(err, store.ErrStaleEpoch) || errors.Is(err, store.ErrConflict) {
				log.Info("op superseded or fenced by a newer op; stopping it")
				cancel()
				return
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("renew op lease", "err", err)
			}
		}
	}
}

// opRun is one execution of one op.
type opRun struct {
	c   *Coordinator
	op  domain.Op
	s   domain.Session
	log *slog.Logger
}

func (x *opRun) run(ctx context.Context) error {
	switch x.op.Kind {
	case domain.OpCreate:
		return x.create(ctx)
	case domain.OpDestroy:
		return x.destroy(ctx)
	case domain.OpRecover:
		return x.recoverLost(ctx)
	case domain.OpEvict:
		return x.evict(ctx)
	case domain.OpSnapshot:
		return x.snapshotOnly(ctx)
	case domain.OpExpire:
		return x.expire(ctx)
	case domain.OpResume:
		return x.resume(ctx)
	default:
		return fmt.Errorf("op kind %s is not supported by this coordinator version", x.op.Kind)
	}
}

// apply moves the session by event e under the op's epoch and notifies
// waiters. An illegal event for the current state is a programming error
// surfaced as an error, never applied.
func (x *opRun) apply(ctx context.Context, e lifecycle.Event, hostID *domain.HostID, reason *string) error {
	return x.applyDesired(ctx, e, hostID, reason, nil)
}

// applyDesired is apply that also records desired (when non-nil) in the
// same fenced write.
func (x *opRun) applyDesired(ctx context.Context, e lifecycle.Event, hostID *domain.HostID, reason *string, desired *domain.DesiredState) error {
	to, err := lifecycle.Transition(x.s.State, e)
	if err != nil {
		return fmt.Errorf("session %s: %w", x.s.ID, err)
	}
	s, err := x.c.st.ApplyTransition(ctx, store.Transition{
		SessionID: x.s.ID, Epoch: x.op.Epoch, From: x.s.State, To: to, Event: e,
		HostID: hostID, Reason: reason, Desired: desired, At: x.c.now(),
	})
	switch {
	case errors.Is(err, store.ErrStaleEpoch), errors.Is(err, store.ErrConflict):
		return fmt.Errorf("apply %s to session %s: %w: %w", e, x.s.ID, errFenced, err)
	case err != nil:
		return transient(fmt.Errorf("apply %s to session %s: %w", e, x.s.ID, err))
	}
	x.log.Info("session transition", "from", x.s.State, "to", to, "event", e)
	x.s = s
	x.c.wake(ctx, SessionTopic(x.s.ID))
	return nil
}

func (x *opRun) step(ctx context.Context, step string) error {
	err := x.c.st.SetOpStep(ctx, x.op.ID, x.op.Epoch, step)
	switch {
	case err == nil:
		x.op.Step = step
		return nil
	case errors.Is(err, store.ErrStaleEpoch), errors.Is(err, store.ErrConflict):
		return fmt.Errorf("op %s step %s: %w: %w", x.op.ID, step, errFenced, err)
	default:
		return transient(fmt.Errorf("op %s step %s: %w", x.op.ID, step, err))
	}
}

// lastAttempt reports whether a transient failure now must be final.
func (x *opRun) lastAttempt() bool { return x.op.Attempts >= maxAttempts }

func ptr[T any](v T) *T { return &v }
