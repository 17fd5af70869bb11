package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		if h.State != store.HostLost {
			continue
		}
		ss, err := c.st.ListSessions(ctx, store.SessionFilter{HostID: h.ID, States: vmStates()})
		if err != nil {
			return fmt.Errorf("list sessions of lost host %s: %w", h.ID, err)
		}
		for _, s := range ss {
			// One recover op per session per host connection, however many
			// replicas notice.
			if err := c.enqueueRecover(ctx, s.ID, fmt.Sprintf("recover:%s:%d", h.ID, h.ConnectedAt.UnixMicro())); err != nil {
				return err
			}
			enqueued = true
		}
	}
	if enqueued {
		c.wake(ctx, topicOps)
	}
	return nil
}

// enqueueRecover hands a session whose machine is gone to a recover op,
// superseding whatever op was in flight.
func (c *Coordinator) enqueueRecover(ctx context.Context, sessionID, key string) error {
	_, err := c.st.EnqueueOp(ctx, store.Op{
		ID: c.newID(), SessionID: sessionID, Kind: store.OpRecover, IdempotencyKey: key, CreatedAt: c.now(),
	}, true)
	if err != nil && !errors.Is(err, store.ErrOpInProgress) {
		return fmt.Errorf("enqueue recover of session %s: %w", sessionID, err)
	}
	return nil
}
