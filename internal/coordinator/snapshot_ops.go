package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/store"
)

// evict snapshots an Active session and frees its host: Active →
// Suspending → (every chunk uploaded, snapshot committed, machine
// destroyed) → Idle. If the snapshot fails the machine keeps running and
// the session goes back to Active.
func (x *opRun) evict(ctx context.Context) error {
	switch x.s.State {
	case domain.SessionIdle:
		return nil
	case domain.SessionActive:
		if err := x.apply(ctx, lifecycle.SuspendRequested, nil, nil); err != nil {
			return err
		}
	case domain.SessionSuspending: // a retried op: capture again under the new epoch
	default:
		return fmt.Errorf("cannot suspend a session that is %s", x.s.State)
	}
	snap, err := x.capture(ctx, true, "suspend")
	if err != nil {
		var herr *hostlink.HostError
		if errors.Is(err, hostlink.ErrNoMachine) {
			return x.machineGone(ctx) // e.g. a retry after the host destroyed it
		}
		if errors.As(err, &herr) || x.lastAttempt() {
			reason := "suspend failed: " + err.Error()
			if ferr := x.apply(ctx, lifecycle.SnapshotFailed, nil, &reason); ferr != nil {
				return ferr
			}
			return errors.New(reason)
		}
		return err
	}
	x.s.HeadSnapshotID = snap.ID
	return x.apply(ctx, lifecycle.Snapshotted, ptr[domain.HostID](""), ptr(""))
}

// snapshotOnly captures an Active session and keeps it running.
func (x *opRun) snapshotOnly(ctx context.Context) error {
	if x.s.State != domain.SessionActive {
		return fmt.Errorf("cannot snapshot a session that is %s", x.s.State)
	}
	_, err := x.capture(ctx, false, "snapshot")
	if errors.Is(err, hostlink.ErrNoMachine) {
		return x.machineGone(ctx)
	}
	return err
}

// machineGone handles a session whose host no longer has its machine:
// like a lost host, it goes back to its last committed snapshot (Idle) or,
// without one, Dead.
func (x *opRun) machineGone(ctx context.Context) error {
	x.log.Warn("machine is gone from its host", "host_id", x.s.HostID)
	return x.recoverLost(ctx)
}

// capture asks the host for a snapshot and commits it: the host answers
// only after every chunk is stored, and one transaction inserts the row and
// advances the session's head, fenced by the op's epoch. The snapshot is
// named by the op, so every attempt of the op asks for the same one: a
// commit that happened is not made again, and a host that destroyed the
// machine after uploading it (the replica died before committing) answers
// with that capture again.
func (x *opRun) capture(ctx context.Context, destroy bool, reason string) (domain.Snapshot, error) {
	if x.s.HeadSnapshotID == domain.SnapshotID(x.op.ID) {
		snap, err := x.c.st.GetSnapshot(ctx, domain.SnapshotID(x.op.ID))
		if err != nil {
			return domain.Snapshot{}, transient(err)
		}
		return snap, nil // committed by an earlier attempt
	}
	if err := x.step(ctx, "snapshot"); err != nil {
		return domain.Snapshot{}, err
	}
	req := hostlink.SnapshotRequest{Epoch: x.op.Epoch, SnapshotID: x.op.ID, Destroy: destroy}
	resp, err := x.c.links.Snapshot(ctx, x.s.HostID, x.s.ID, req)
	var herr *hostlink.HostError
	switch {
	case errors.Is(err, hostlink.ErrStaleEpoch):
		return domain.Snapshot{}, fmt.Errorf("snapshot on host %s: %w", x.s.HostID, errFenced)
	case errors.As(err, &herr):
		return domain.Snapshot{}, err
	case err != nil:
		return domain.Snapshot{}, transient(fmt.Errorf("snapshot on host %s: %w", x.s.HostID, err))
	}
	snap := domain.Snapshot{
		ID: domain.SnapshotID(req.SnapshotID), SessionID: x.s.ID, ParentID: x.s.HeadSnapshotID, HostID: x.s.HostID,
		Epoch: x.op.Epoch, Manifests: resp.Manifests, Facts: resp.Facts, Bytes: resp.Bytes,
		Uploaded: resp.Uploaded, OutboxSeq: resp.OutboxSeq, HarnessSeq: -1, Reason: reason, CreatedAt: x.c.now(),
	}
	if resp.HarnessSeq != nil {
		snap.HarnessSeq = *resp.HarnessSeq
	}
	if err := x.step(ctx, "commit"); err != nil {
		return domain.Snapshot{}, err
	}
	if err := x.c.st.CommitSnapshot(ctx, snap, x.op.Epoch); err != nil {
		if errors.Is(err, store.ErrStaleEpoch) {
			return domain.Snapshot{}, fmt.Errorf("commit snapshot %s: %w: %w", snap.ID, errFenced, err)
		}
		return domain.Snapshot{}, transient(fmt.Errorf("commit snapshot %s: %w", snap.ID, err))
	}
	x.log.Info("snapshot committed", "snapshot_id", snap.ID, "bytes", snap.Bytes, "uploaded", snap.Uploaded, "ms", resp.DurationMS)
	x.c.met.SnapshotUploaded(snap.Uploaded)
	x.appendEvent(ctx, "snapshot", map[string]any{"snapshot_id": snap.ID, "bytes": snap.Bytes, "uploaded": snap.Uploaded, "reason": reason})
	return snap, nil
}

// resume restores an Idle session's head snapshot on a compatible host,
// preferring one that caches its chunks. A snapshot that cannot be read
// (missing or corrupt chunk) ends the session Dead; other failures leave it
// Idle to be tried again.
func (x *opRun) resume(ctx context.Context) error {
	switch x.s.State {
	case domain.SessionActive:
		return x.deliverOutbox(ctx)
	case domain.SessionIdle, domain.SessionResuming:
	default:
		return fmt.Errorf("cannot resume a session that is %s", x.s.State)
	}
	if x.s.HeadSnapshotID == "" {
		reason := "no committed snapshot to resume from"
		return x.apply(ctx, lifecycle.Unrestorable, nil, &reason)
	}
	snap, err := x.c.st.GetSnapshot(ctx, x.s.HeadSnapshotID)
	if err != nil {
		return transient(err)
	}
	spec := x.s.Spec
	hostID := x.s.HostID
	if x.s.State == domain.SessionIdle {
		if x.op.Step != stepQueued {
			if err := x.step(ctx, "place"); err != nil {
				return err
			}
		}
		need := scheduler.Need{Snapshot: &scheduler.SnapshotNeed{ID: snap.ID, Facts: snap.Facts}}
		hostID, err = x.placeOrQueue(ctx, spec, need)
		if err != nil {
			// Stays Idle: it waits in the queue for room, or (refused)
			// the next request places it again.
			return err
		}
		// Whoever asked for the resume (session resume, an exec, a file, an
		// outbox item) wants the session active: a suspend's wish for idle
		// ends here (a wish to delete stays).
		if err := x.applyDesired(ctx, lifecycle.ResumeRequested, &hostID, nil, ptr(domain.DesireActive)); err != nil {
			return err
		}
	}
	// A retried resume stays on its host: an earlier attempt may have
	// started the machine there, and placing it elsewhere could make two
	// live copies. If that host is lost, the monitor's recover op takes
	// over once the host's lease has paused it.
	if err := x.rollbackOutbox(ctx); err != nil {
		return err
	}
	if err := x.step(ctx, "restore"); err != nil {
		return err
	}
	req := hostlink.StartRequest{Epoch: x.op.Epoch, Spec: hostlink.MachineSpecOf(spec),
		Restore: &hostlink.RestoreSpec{SnapshotID: string(snap.ID), Manifests: snap.Manifests}}
	_, err = x.c.links.Start(ctx, hostID, x.s.ID, req)
	var herr *hostlink.HostError
	switch {
	case err == nil:
	case errors.Is(err, hostlink.ErrStaleEpoch):
		return fmt.Errorf("restore on host %s: %w", hostID, errFenced)
	case errors.Is(err, hostlink.ErrSnapshotUnusable):
		reason := fmt.Sprintf("snapshot %s cannot be restored: %v", snap.ID, err)
		if ferr := x.apply(ctx, lifecycle.Unrestorable, nil, &reason); ferr != nil {
			return ferr
		}
		return errors.New(reason)
	case errors.As(err, &herr):
		return x.resumeFailed(ctx, fmt.Errorf("restore on host %s: %w", hostID, err))
	default:
		return transient(fmt.Errorf("restore on host %s: %w", hostID, err))
	}
	if err := x.apply(ctx, lifecycle.Resumed, nil, ptr("")); err != nil {
		return err
	}
	return x.deliverOutbox(ctx)
}

// resumeFailed ends a resume the host refused outright: nothing runs
// there, so the session goes back to Idle with the reason.
func (x *opRun) resumeFailed(ctx context.Context, cause error) error {
	reason := "resume failed: " + cause.Error()
	if err := x.apply(ctx, lifecycle.ResumeFailed, ptr[domain.HostID](""), &reason); err != nil {
		return err
	}
	return errors.New(reason)
}

func (x *opRun) appendEvent(ctx context.Context, typ string, data any) {
	b, _ := json.Marshal(data)
	if _, err := x.c.st.AppendEvent(ctx, store.NewEvent{SessionID: x.s.ID, Type: typ, Data: b, Epoch: x.op.Epoch, At: x.c.now()}); err != nil {
		x.log.Warn("append event", "type", typ, "err", err)
	}
	x.c.wake(ctx, SessionTopic(x.s.ID))
}

// appendEventTo appends an event to another session's log (unfenced: this
// op does not own it).
func (x *opRun) appendEventTo(ctx context.Context, id domain.SessionID, typ string, data any) {
	b, _ := json.Marshal(data)
	if _, err := x.c.st.AppendEvent(ctx, store.NewEvent{SessionID: id, Type: typ, Data: b, At: x.c.now()}); err != nil {
		x.log.Warn("append event", "type", typ, "to_session_id", id, "err", err)
	}
	x.c.wake(ctx, SessionTopic(id))
}
