package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// outboxBatch bounds one delivery to a host.
const outboxBatch = 64

// PutOutbox records a command for a session (exactly once per item id) and
// delivers it: at once if the session is Active, else by resuming it.
func (c *Coordinator) PutOutbox(ctx context.Context, sessionID domain.SessionID, id, kind string, payload json.RawMessage) (domain.OutboxItem, error) {
	if id == "" || len(id) > 128 || kind == "" || len(kind) > 64 || len(payload) > 1<<20 {
		return domain.OutboxItem{}, fmt.Errorf("%w: outbox items need an id (<=128 bytes), a kind (<=64 bytes) and a payload under 1 MiB", domain.ErrInvalid)
	}
	s, err := c.st.GetSession(ctx, sessionID)
	if err != nil {
		return domain.OutboxItem{}, err
	}
	if s.State.Terminal() {
		return domain.OutboxItem{}, fmt.Errorf("%w: session %s is %s", domain.ErrNotActive, sessionID, s.State)
	}
	it, created, err := c.st.PutOutbox(ctx, domain.OutboxItem{SessionID: sessionID, ID: id, Kind: kind, Payload: payload, CreatedAt: c.now()})
	if err != nil {
		return it, fmt.Errorf("put outbox item %s: %w", id, err)
	}
	if created {
		go func() { // resumes an Idle session; delivers to an Active one
			_, _ = c.enqueueWhenFree(context.WithoutCancel(ctx), domain.Op{ID: c.newID(), SessionID: sessionID, Kind: domain.OpResume, CreatedAt: c.now()})
		}()
	}
	return it, nil
}

// requestResume enqueues a resume op (which also delivers pending outbox
// items) and reports it, unless another op is already in flight: that op's
// end wakes the session, and the caller asks again.
func (c *Coordinator) requestResume(ctx context.Context, sessionID domain.SessionID) (domain.Op, bool) {
	op, err := c.st.EnqueueOp(ctx, domain.Op{ID: c.newID(), SessionID: sessionID, Kind: domain.OpResume, CreatedAt: c.now()}, false)
	if err != nil {
		if !errors.Is(err, store.ErrOpInProgress) {
			c.log.Warn("enqueue resume", "session_id", sessionID, "err", err)
		}
		return op, false
	}
	c.wake(ctx, TopicOps)
	return op, true
}

// rollbackOutbox returns items the lost incarnation applied after the head
// snapshot to pending: the snapshot's state has not applied them.
func (x *opRun) rollbackOutbox(ctx context.Context) error {
	after := int64(0)
	if x.s.HeadSnapshotID != "" {
		snap, err := x.c.st.GetSnapshot(ctx, x.s.HeadSnapshotID)
		if err != nil {
			return transient(err)
		}
		after = snap.OutboxSeq
	}
	if err := x.c.st.RollbackOutbox(ctx, x.s.ID, after, x.op.Epoch); err != nil {
		if errors.Is(err, store.ErrStaleEpoch) {
			return fmt.Errorf("roll back outbox: %w: %w", errFenced, err)
		}
		return transient(fmt.Errorf("roll back outbox: %w", err))
	}
	return x.notifyRestored(ctx)
}

// notifyRestored tells the RestoreObservers that the session resumes from
// its head snapshot after its incarnation was lost (tasks lower their
// harness event cursor to what the snapshot had). A failure is transient.
func (x *opRun) notifyRestored(ctx context.Context) error {
	if x.s.HeadSnapshotID == "" || len(x.c.restd) == 0 {
		return nil
	}
	snap, err := x.c.st.GetSnapshot(ctx, x.s.HeadSnapshotID)
	if err != nil {
		return transient(err)
	}
	for _, o := range x.c.restd {
		if err := o.SessionRestored(ctx, x.s, snap); err != nil {
			return transient(err)
		}
	}
	return nil
}

// deliverOutbox hands pending items to the running guest in order and
// records what it applied. The guest skips items it already applied, so a
// repeated delivery never applies one twice.
func (x *opRun) deliverOutbox(ctx context.Context) error {
	if x.s.State != domain.SessionActive {
		return nil
	}
	after := int64(0)
	for {
		items, err := x.c.st.ListOutbox(ctx, x.s.ID, after, outboxBatch)
		if err != nil {
			return transient(fmt.Errorf("list outbox: %w", err))
		}
		var send []hostlink.OutboxItem
		for _, it := range items {
			after = it.Seq
			if it.State == domain.OutboxPending {
				send = append(send, hostlink.OutboxItem{Seq: it.Seq, ID: it.ID, Kind: it.Kind, Payload: it.Payload})
			}
		}
		if len(send) > 0 {
			if err := x.sendOutbox(ctx, send); err != nil {
				return err
			}
		}
		if len(items) < outboxBatch {
			return nil
		}
	}
}

func (x *opRun) sendOutbox(ctx context.Context, items []hostlink.OutboxItem) error {
	if err := x.step(ctx, "deliver"); err != nil {
		return err
	}
	applied, err := x.c.links.Deliver(ctx, x.s.HostID, x.s.ID, hostlink.OutboxDelivery{Epoch: x.op.Epoch, Items: items})
	switch {
	case errors.Is(err, hostlink.ErrStaleEpoch):
		return fmt.Errorf("deliver outbox: %w", errFenced)
	case err != nil:
		// Items stay pending for the next delivery; the session's state is
		// not this failure's to change.
		return transient(fmt.Errorf("deliver outbox to host %s: %w", x.s.HostID, err))
	}
	if err := x.c.st.MarkDelivered(ctx, x.s.ID, applied.Applied, x.op.Epoch, x.c.now()); err != nil {
		if errors.Is(err, store.ErrStaleEpoch) {
			return fmt.Errorf("mark outbox delivered: %w: %w", errFenced, err)
		}
		return transient(fmt.Errorf("mark outbox delivered: %w", err))
	}
	x.appendEvent(ctx, "outbox", map[string]any{"applied": applied.Applied})
	return nil
}
