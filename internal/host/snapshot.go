package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
)

const destroyAttempts = 3

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
	if local, ok := snapshots.LocalFor(l.reg.Dir(sid), req.SnapshotID); ok {
		return l.finishLocal(ctx, log, sid, req, local)
	}
	if err := l.releaseHeld(ctx, sid, req.Epoch); err != nil {
		return nil, err
	}
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
	return l.answerCapture(ctx, sid, req, resp)
}

// answerCapture encodes a capture's answer; the answer of one that
// destroyed its machine is kept before it is sent.
func (l *lifecycle) answerCapture(ctx context.Context, sid string, req hostlink.SnapshotRequest, resp hostlink.SnapshotResponse) (json.RawMessage, error) {
	answer, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot answer of session %s: %w", sid, err)
	}
	answer = append(answer, '\n') // as json.Encoder writes it
	if req.Destroy {
		if err := l.snaps.KeepAnswer(sid, req.SnapshotID, answer); err != nil {
			l.log.Warn("keep the answer of a capture that destroyed its machine", "session_id", sid, "err", err)
		}
		l.checkpoint(ctx, "snapshot-destroyed")
	}
	return answer, nil
}

// releaseHeld resumes sid's machine if it is held paused for a complete
// capture that this command (another snapshot id) is not: the
// coordinator is past that capture. Callers hold the session lock.
func (l *lifecycle) releaseHeld(ctx context.Context, sid string, epoch int64) error {
	mc := l.reg.Get(sid)
	if mc == nil || !mc.Held(l.now()) {
		return nil
	}
	if err := l.reg.AdoptEpoch(mc, epoch); err != nil {
		return err
	}
	l.resumeLocked(ctx, mc, "a capture of another snapshot")
	return nil
}

// finishLocal answers a capture whose files a previous agent left
// complete on disk (the machine paused since, or gone): it uploads them,
// then destroys the machine or resumes it as the command asks, so what
// the guest did before the capture began is kept. Callers hold the
// session lock.
func (l *lifecycle) finishLocal(ctx context.Context, log *slog.Logger, sid string, req hostlink.SnapshotRequest, local snapshots.Local) (json.RawMessage, error) {
	start := l.now()
	mc := l.reg.Get(sid)
	var err error
	if mc != nil {
		err = l.reg.AdoptEpoch(mc, req.Epoch)
	} else {
		err = l.reg.Fence(sid, req.Epoch)
	}
	if err != nil {
		return nil, err
	}
	if l.lease.Expired() {
		return nil, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused, l.lease.Err())
	}
	ctx, cancel := l.lease.OpContext(ctx)
	defer cancel()
	live := mc != nil
	if live {
		_, exited, _ := mc.State()
		live = !exited
	}
	log.Info("finishing a snapshot a previous agent left complete on disk", "machine", live, "taken", local.Taken)
	dir := l.reg.Dir(sid)
	taken, err := l.snaps.UploadLocal(ctx, sid, dir, local)
	if err != nil {
		if live { // a later capture takes the machine afresh
			l.continueAfterSnapshot(ctx, log, mc)
		}
		return nil, fmt.Errorf("upload the snapshot left on disk: %w", err)
	}
	l.afterLocal(ctx, log, sid, mc, live, req.Destroy)
	resp := hostlink.SnapshotResponse{
		SnapshotID: req.SnapshotID, Manifests: taken.Manifests, Facts: l.facts(),
		Bytes: taken.Stats.Bytes, Uploaded: taken.Stats.StoredBytes,
		OutboxSeq: local.OutboxSeq, HarnessSeq: local.HarnessSeq, DurationMS: l.now().Sub(start).Milliseconds(),
	}
	log.Info("local snapshot uploaded", "bytes", resp.Bytes, "uploaded", resp.Uploaded, "outbox_seq", resp.OutboxSeq, "destroyed", req.Destroy)
	return l.answerCapture(ctx, sid, req, resp)
}

// afterLocal destroys or resumes sid's machine mc (nil when it is gone;
// live when it has not exited) once its local capture is uploaded, and
// removes the capture's files.
func (l *lifecycle) afterLocal(ctx context.Context, log *slog.Logger, sid string, mc *machines.Machine, live, destroy bool) {
	if mc != nil {
		mc.Hold(time.Time{})
	}
	switch {
	case mc != nil && destroy:
		l.destroyAfterSnapshot(ctx, log, mc) // cleans the dir
	case live:
		l.continueAfterSnapshot(ctx, log, mc) // drops the capture first
	case mc == nil: // the dir holds only the record and the capture
		if err := machines.CleanDir(l.reg.Dir(sid)); err != nil {
			log.Warn("clean machine dir", "err", err)
		}
	default: // an exited machine: reconcile or the next start destroys it
		if err := snapshots.DropLocal(l.reg.Dir(sid)); err != nil {
			log.Warn("remove local snapshot files", "err", err)
		}
	}
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
	files, err := snapshots.NewLocalDir(dir, req.SnapshotID)
	if err != nil {
		return resp, fmt.Errorf("snapshot session %s: %w", sid, err)
	}
	defer func() {
		if err := snapshots.DropLocal(dir); err != nil {
			log.Warn("remove local snapshot files", "err", err)
		}
	}()
	outboxSeq, harnessSeq, err := l.quiesce(ctx, mc)
	if err != nil {
		return resp, err
	}
	taken, err := l.snaps.Take(ctx, snapshots.Take{SessionID: sid, SnapshotID: req.SnapshotID, Epoch: req.Epoch, VM: mc.VM(),
		FilesDir: files, MachineDir: dir, MemParent: mc.MemParent(),
		Quiesced: snapshots.Quiesced{OutboxSeq: outboxSeq, HarnessSeq: harnessSeq}})
	if err != nil {
		l.continueAfterSnapshot(ctx, log, mc)
		return resp, err
	}
	mc.SetMemParent(taken.Memory)
	l.checkpoint(ctx, "snapshot-uploaded")
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
	// The capture's files may share storage with the running machine: no
	// marker may say they are its state once it runs on.
	if err := snapshots.DropLocal(l.reg.Dir(mc.SessionID())); err != nil {
		log.Error("cannot remove the local snapshot; leaving the machine paused", "err", err)
		l.reg.SetPaused(mc, true)
		return
	}
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
