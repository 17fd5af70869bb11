package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// monitorLoop marks hosts lost when their heartbeats stop and hands their
// sessions to recover ops. Every replica runs it; the store makes each step
// idempotent, so replicas racing here do no harm.
//
// Heartbeats can only have arrived while some replica could write them. So
// a replica judges heartbeats only after it has itself been watching,
// without a failed or late pass, for HostLostAfter: after a coordinator
// restart or a database outage, hosts get a full interval to reconnect
// before any is declared lost.
func (c *Coordinator) monitorLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.MonitorInterval)
	defer t.Stop()
	watching := c.now()
	last := watching
	for {
		now := c.now()
		if now.Sub(last) > 3*c.cfg.MonitorInterval {
			watching = now // this replica was stalled: it saw nothing meanwhile
		}
		last = now
		judge := now.Sub(watching) >= c.cfg.HostLostAfter
		if err := c.checkHosts(ctx, judge); err != nil && ctx.Err() == nil {
			c.log.Error("check host heartbeats", "err", err)
			watching = c.now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkHosts is one monitor pass; judge says whether this replica may mark
// hosts lost yet.
func (c *Coordinator) checkHosts(ctx context.Context, judge bool) error {
	if judge {
		lost, err := c.st.MarkHostsLost(ctx, c.now().Add(-c.cfg.HostLostAfter))
		if err != nil {
			return fmt.Errorf("mark hosts lost: %w", err)
		}
		for _, id := range lost {
			c.log.Warn("host lost: no heartbeat", "host_id", id, "after", c.cfg.HostLostAfter)
		}
	}
	hosts, err := c.st.ListHosts(ctx)
	if err != nil {
		return fmt.Errorf("list hosts: %w", err)
	}
	enqueued := false
	for _, h := range hosts {
		if h.State != domain.HostLost {
			continue
		}
		n, err := c.recoverHost(ctx, h)
		if err != nil {
			return err
		}
		enqueued = enqueued || n > 0
	}
	n, err := c.evictIdle(ctx)
	if err != nil {
		return err
	}
	expired, err := c.expireOld(ctx)
	if err != nil {
		return err
	}
	if n > 0 || expired > 0 || enqueued {
		c.wake(ctx, TopicOps)
	}
	return nil
}

// recoverHost hands every session of lost host h that may own a machine
// to a recover op and returns how many it has.
func (c *Coordinator) recoverHost(ctx context.Context, h domain.Host) (int, error) {
	ss, err := c.st.ListSessions(ctx, domain.SessionFilter{HostID: h.ID, States: domain.VMStates()})
	if err != nil {
		return 0, fmt.Errorf("list sessions of lost host %s: %w", h.ID, err)
	}
	for _, s := range ss {
		// One recover op per session per host connection, however many
		// replicas (and revocations) notice.
		if err := c.enqueueRecover(ctx, s.ID, fmt.Sprintf("recover:%s:%d", h.ID, h.ConnectedAt.UnixMicro())); err != nil {
			return 0, err
		}
	}
	return len(ss), nil
}

// maxLifetime is s's hard time limit, 0 for none.
func (c *Coordinator) maxLifetime(s domain.Session) time.Duration {
	limit := c.cfg.MaxLifetime
	if s.Spec.MaxLifetimeSec != 0 {
		limit = time.Duration(max(s.Spec.MaxLifetimeSec, 0)) * time.Second
	}
	return limit
}

// expireOld enqueues an expire op for every live session past its hard
// time limit and returns how many. A session with an op in flight is
// taken at a later tick.
func (c *Coordinator) expireOld(ctx context.Context) (int, error) {
	var live []domain.SessionState
	for _, st := range domain.SessionStates {
		if !st.Terminal() {
			live = append(live, st)
		}
	}
	ss, err := c.st.ListSessions(ctx, domain.SessionFilter{States: live})
	if err != nil {
		return 0, fmt.Errorf("list live sessions: %w", err)
	}
	n := 0
	for _, s := range ss {
		limit := c.maxLifetime(s)
		if limit <= 0 || c.now().Sub(s.CreatedAt) < limit {
			continue
		}
		_, err := c.st.EnqueueOp(ctx, domain.Op{ID: c.newID(), SessionID: s.ID, Kind: domain.OpExpire,
			IdempotencyKey: "expire", CreatedAt: c.now()}, false)
		if err != nil && !errors.Is(err, store.ErrOpInProgress) {
			return n, fmt.Errorf("enqueue expiry of session %s: %w", s.ID, err)
		}
		if err == nil {
			c.log.Info("session past its time limit: ending it", "session_id", s.ID, "limit", limit)
			n++
		}
	}
	return n, nil
}

// evictIdle enqueues a suspend for every Active session idle longer than
// its timeout and returns how many.
func (c *Coordinator) evictIdle(ctx context.Context) (int, error) {
	ss, err := c.st.ListSessions(ctx, domain.SessionFilter{States: []domain.SessionState{domain.SessionActive}})
	if err != nil {
		return 0, fmt.Errorf("list active sessions: %w", err)
	}
	n := 0
	for _, s := range ss {
		timeout := c.cfg.IdleTimeout
		if s.Spec.IdleTimeoutSec != 0 {
			if s.Spec.IdleTimeoutSec < 0 {
				continue
			}
			timeout = time.Duration(s.Spec.IdleTimeoutSec) * time.Second
		}
		last := s.LastActivity
		if s.UpdatedAt.After(last) {
			last = s.UpdatedAt // it just became active
		}
		if c.now().Sub(last) < timeout {
			continue
		}
		_, err := c.st.EnqueueOp(ctx, domain.Op{ID: c.newID(), SessionID: s.ID, Kind: domain.OpEvict,
			IdempotencyKey: fmt.Sprintf("idle:%d", last.UnixMicro()), CreatedAt: c.now()}, false)
		if err != nil && !errors.Is(err, store.ErrOpInProgress) {
			return n, fmt.Errorf("enqueue idle suspend of session %s: %w", s.ID, err)
		}
		if err == nil {
			c.log.Info("session idle: suspending", "session_id", s.ID, "idle_for", c.now().Sub(last).Round(time.Second))
			n++
		}
	}
	return n, nil
}

// enqueueRecover hands a session whose machine is gone to a recover op,
// superseding whatever op was in flight.
func (c *Coordinator) enqueueRecover(ctx context.Context, sessionID domain.SessionID, key string) error {
	_, err := c.st.EnqueueOp(ctx, domain.Op{
		ID: c.newID(), SessionID: sessionID, Kind: domain.OpRecover, IdempotencyKey: key, CreatedAt: c.now(),
	}, true)
	if err != nil && !errors.Is(err, store.ErrOpInProgress) {
		return fmt.Errorf("enqueue recover of session %s: %w", sessionID, err)
	}
	return nil
}
