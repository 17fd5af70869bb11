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
func (c *Coordinator) monitorLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.MonitorInterval)
	defer t.Stop()
	for {
		if err := c.checkHosts(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("check host heartbeats", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkHosts is one monitor pass.
func (c *Coordinator) checkHosts(ctx context.Context) error {
	lost, err := c.st.MarkHostsLost(ctx, c.now().Add(-c.cfg.HostLostAfter))
	if err != nil {
		return fmt.Errorf("mark hosts lost: %w", err)
	}
	for _, id := range lost {
		c.log.Warn("host lost: no heartbeat", "host_id", id, "after", c.cfg.HostLostAfter)
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
			key := fmt.Sprintf("recover:%s:%d", h.ID, h.ConnectedAt.UnixMicro())
			_, err := c.st.EnqueueOp(ctx, store.Op{
				ID: c.newID(), SessionID: s.ID, Kind: store.OpRecover, IdempotencyKey: key, CreatedAt: c.now(),
			}, true)
			if err != nil && !errors.Is(err, store.ErrOpInProgress) {
				return fmt.Errorf("enqueue recover of session %s: %w", s.ID, err)
			}
			enqueued = true
		}
	}
	if enqueued {
		c.wake(ctx, topicOps)
	}
	return nil
}
