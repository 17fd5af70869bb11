package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
)

const (
	snapshotTempPrefix = "snapshot-" // inside a machine dir: files of a snapshot being uploaded
	destroyAttempts    = 3
)

// snapshotCommand captures a session's machine into chunks and answers
// with the SnapshotResponse as JSON. A retried capture (retry: the epoch
// header repeats the body's) whose machine this host already destroyed
// gets the kept answer; the answer of a capture that destroys its machine
// is kept before it is sent (snapshots.KeepAnswer).
func (l *lifecycle) snapshotCommand(ctx context.Context, sid string, req hostlink.SnapshotRequest, retry bool) (json.RawMessage, error) {
	if req.Destroy && retry {
		if answer, ok, err := l.keptAnswer(sid, req); ok {
			return answer, err
		}
	}
	if !hostfs.ValidName(req.SnapshotID) {
		return nil, failure.New(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("bad snapshot id %q", req.SnapshotID))
	}
	if !l.snaps.Supported() {
		return nil, failure.New(http.StatusNotImplemented, hostlink.CodeUnsupported, errors.New("snapshot: this host has no chunk store configured"))
	}
	log := l.log.With("session_id", sid, "epoch", req.Epoch, "snapshot_id", req.SnapshotID)
	unlock := l.reg.Lock(sid)
	defer unlock()
	mc, err := l.usableMachine(sid, req.Epoch)
	if err == nil {
		err = l.reg.AdoptEpoch(mc, req.Epoch)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := l.lease.OpContext(ctx)
	defer cancel()
	resp, err := l.snapshot(ctx, log, mc, req)
	if err != nil {
		log.Error("snapshot failed; the machine runs on", "err", err)
		return nil, err
	}
	log.Info("snapshot uploaded", "bytes", resp.Bytes, "uploaded", resp.Uploaded, "outbox_seq", resp.OutboxSeq,
		"duration_ms", resp.DurationMS, "destroyed", req.Destroy)
	answer, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot answer of session %s: %w", sid, err)
	}
	answer = append(answer, '\n') // as json.Encoder writes it
	if req.Destroy {
		if err := l.snaps.KeepAnswer(sid, req.SnapshotID, answer); err != nil {
			l.log.Warn("keep the answer of a capture that destroyed its machine", "session_id", sid, "err", err)
		}
	}
	return answer, nil
}

// keptAnswer is the kept answer of req if the session has no machine
// here; ok reports whether it answers req (err then is a fencing refusal).
func (l *lifecycle) keptAnswer(sid string, req hostlink.SnapshotRequest) (answer json.RawMessage, ok bool, err error) {
	unlock := l.reg.Lock(sid)
	defer unlock()
	answer, found := l.snaps.KeptAnswer(sid, req.SnapshotID)
	if !found || l.reg.Get(sid) != nil {
		return nil, false, nil
	}
	if err := l.reg.Fence(sid, req.Epoch); err != nil {
		return nil, true, err
	}
	l.log.Info("retried capture: answering with the one that destroyed the machine", "session_id", sid,
		"epoch", req.Epoch, "snapshot_id", req.SnapshotID)
	return answer, true, nil
}

// snapshot quiesces mc's guest, reads its outbox seq (and harness event
// head), pauses it and uploads its state, then destroys or resumes it. It
// answers only after every chunk is stored. On any failure the machine
// runs on: it is never destroyed unless its state was uploaded whole.
// Callers hold the session lock.
func (l *lifecycle) snapshot(ctx context.Context, log *slog.Logger, mc *machines.Machine, req hostlink.SnapshotRequest) (hostlink.SnapshotResponse, error) {
	start := l.now()
	sid := mc.SessionID()
	var resp hostlink.SnapshotResponse
	dir := l.reg.Dir(sid)
	tmp, err := os.MkdirTemp(dir, snapshotTempPrefix)
	if err != nil {
		return resp, fmt.Errorf("snapshot session %s: %w", sid, err)
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			log.Warn("remove local snapshot files", "err", err)
		}
	}()
	outboxSeq, harnessSeq, err := l.quiesce(ctx, mc)
	if err != nil {
		return resp, err
	}
	taken, err := l.snaps.Take(ctx, snapshots.Take{SessionID: sid, SnapshotID: req.SnapshotID, VM: mc.VM(),
		FilesDir: tmp, MachineDir: dir, MemParent: mc.MemParent()})
	if err != nil {
		l.continueAfterSnapshot(ctx, log, mc)
		return resp, err
	}
	mc.SetMemParent(taken.Memory)
	if req.Destroy {
		l.destroyAfterSnapshot(ctx, log, mc)
	} else {
		l.continueAfterSnapshot(ctx, log, mc)
	}
	return hostlink.SnapshotResponse{
		SnapshotID: req.SnapshotID,
		Manifests:  taken.Manifests,
		Facts:      l.facts(),
		Bytes:      taken.Stats.Bytes,
		Uploaded:   taken.Stats.StoredBytes,
		OutboxSeq:  outboxSeq,
		HarnessSeq: harnessSeq,
		DurationMS: l.now().Sub(start).Milliseconds(),
	}, nil
}

// quiesce syncs mc's guest and reads what its state has applied: the
// outbox seq and, with a harness, the harness event log head (events
// after it, of a turn still running, are in the snapshot too and may be
// relayed again after a rollback). No delivery can run until the session
// lock is released.
func (l *lifecycle) quiesce(ctx context.Context, mc *machines.Machine) (outboxSeq int64, harnessSeq *int64, err error) {
	sid := mc.SessionID()
	if err := mc.Call(ctx, http.MethodPost, guestapi.PathSync, nil, nil); err != nil {
		return 0, nil, failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("quiesce guest of session %s: %w", sid, err))
	}
	var outbox guestapi.OutboxState
	if err := mc.Call(ctx, http.MethodGet, guestapi.PathOutbox, nil, &outbox); err != nil {
		return 0, nil, failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read outbox seq of session %s: %w", sid, err))
	}
	if mc.Spec().HarnessID != "" {
		var hs guestapi.HarnessStatus
		if err := mc.Call(ctx, http.MethodGet, guestapi.PathHarness, nil, &hs); err != nil {
			return 0, nil, failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read harness event seq of session %s: %w", sid, err))
		}
		harnessSeq = &hs.LastSeq
	}
	return outbox.Applied, harnessSeq, nil
}

// continueAfterSnapshot resumes mc after a snapshot (kept or failed), or
// leaves it paused if the lease expired meanwhile. A machine that cannot
// be resumed is reported paused; reconcile retries. Callers hold the
// session lock.
func (l *lifecycle) continueAfterSnapshot(ctx context.Context, log *slog.Logger, mc *machines.Machine) {
	if l.lease.Expired() {
		l.pauseLocked(ctx, mc, "lease expired during a snapshot")
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.VM().Resume(rctx); err != nil {
		log.Error("resume after snapshot failed; reporting the machine paused until a retry resumes it", "err", err)
		l.reg.SetPaused(mc, true)
	}
}

// destroyAfterSnapshot destroys mc once its state is uploaded. If that
// keeps failing, the machine (paused by the snapshot) is reported exited,
// so reconcile or the next start destroys it. Callers hold the session
// lock.
func (l *lifecycle) destroyAfterSnapshot(ctx context.Context, log *slog.Logger, mc *machines.Machine) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	var err error
	for range destroyAttempts {
		if err = l.destroy(dctx, mc.SessionID(), "snapshot uploaded"); err == nil {
			return
		}
	}
	log.Error("destroy after snapshot failed; the paused machine is reported exited until reconciled", "err", err)
	mc.MarkExited()
}

// deliver hands outbox items to the session's guest, which applies each
// exactly once and in order, and returns the highest seq applied. An
// empty delivery just reads it.
func (l *lifecycle) deliver(ctx context.Context, sid string, req hostlink.OutboxDelivery) (int64, error) {
	// The session lock orders deliveries with snapshots: the seq a
	// snapshot reports is exactly what its state has applied.
	unlock := l.reg.Lock(sid)
	defer unlock()
	mc, err := l.usableMachine(sid, req.Epoch)
	if err != nil {
		return 0, err
	}
	done := mc.Active()
	defer done()
	ctx, cancel := l.lease.OpContext(ctx)
	defer cancel()
	var st guestapi.OutboxState
	if len(req.Items) == 0 {
		err = mc.Call(ctx, http.MethodGet, guestapi.PathOutbox, nil, &st)
	} else {
		apply := guestapi.OutboxApply{Entries: make([]guestapi.OutboxEntry, len(req.Items))}
		for i, it := range req.Items {
			apply.Entries[i] = guestapi.OutboxEntry{Seq: it.Seq, ID: it.ID, Kind: it.Kind, Payload: it.Payload}
		}
		err = mc.Call(ctx, http.MethodPost, guestapi.PathOutbox, apply, &st)
	}
	if err != nil {
		return 0, failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("deliver outbox to session %s: %w", sid, err))
	}
	l.log.Debug("outbox delivered", "session_id", sid, "epoch", req.Epoch, "items", len(req.Items), "applied", st.Applied)
	return st.Applied, nil
}
