package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

const (
	snapshotTempPrefix = "snapshot-" // inside a machine dir: files of a snapshot being uploaded
	roleMemory         = "memory"    // chunked with Deps.MemoryChunks
	destroyAttempts    = 3
)

// snapshotMachine captures a session's machine into chunks: quiesce the
// guest, read its outbox seq, pause and write the files, upload every chunk
// the store lacks, then destroy or resume the machine. It answers only
// after every chunk is stored. On any failure the machine runs on: it is
// never destroyed unless its state was uploaded whole.
func (a *Agent) snapshotMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.SnapshotRequest
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	if !validSessionID(req.SnapshotID) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("bad snapshot id %q", req.SnapshotID))
		return
	}
	if a.deps.DiskChunks == nil {
		hostlink.WriteError(w, http.StatusNotImplemented, hostlink.CodeUnsupported, "snapshot: this host has no chunk store configured")
		return
	}
	log := a.log.With("session_id", sid, "epoch", req.Epoch, "snapshot_id", req.SnapshotID)
	unlock := a.locks.lock(sid)
	defer unlock()
	mc, err := a.usableMachine(sid, req.Epoch)
	if err == nil {
		err = a.adoptEpoch(mc, req.Epoch)
	}
	if err != nil {
		a.writeErr(w, sid, err)
		return
	}
	ctx, cancel := a.opContext(r.Context())
	defer cancel()
	resp, err := a.snapshot(ctx, log, mc, req)
	if err != nil {
		log.Error("snapshot failed; the machine runs on", "error", err)
		a.writeErr(w, sid, err)
		return
	}
	log.Info("snapshot uploaded", "bytes", resp.Bytes, "uploaded", resp.Uploaded, "outbox_seq", resp.OutboxSeq,
		"duration_ms", resp.DurationMS, "destroyed", req.Destroy)
	writeJSON(w, http.StatusOK, resp)
}

// snapshot does the work of snapshotMachine. Callers hold the session lock.
func (a *Agent) snapshot(ctx context.Context, log *slog.Logger, mc *machine, req hostlink.SnapshotRequest) (hostlink.SnapshotResponse, error) {
	start := a.deps.Now()
	sid := mc.sessionID
	var resp hostlink.SnapshotResponse
	tmp, err := os.MkdirTemp(a.machineDir(sid), snapshotTempPrefix)
	if err != nil {
		return resp, fmt.Errorf("snapshot session %s: %w", sid, err)
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			log.Warn("remove local snapshot files", "error", err)
		}
	}()
	if err := a.guestCall(ctx, mc, http.MethodPost, guestapi.PathSync, nil, nil); err != nil {
		return resp, failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("quiesce guest of session %s: %w", sid, err))
	}
	// No delivery can run until we unlock: this is what the state applied.
	var outbox guestapi.OutboxState
	if err := a.guestCall(ctx, mc, http.MethodGet, guestapi.PathOutbox, nil, &outbox); err != nil {
		return resp, failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read outbox seq of session %s: %w", sid, err))
	}
	// The harness's event log head: events after it (a turn still running)
	// are in the snapshot too and may be relayed again after a rollback.
	var harnessSeq *int64
	if mc.spec.HarnessID != "" {
		var hs guestapi.HarnessStatus
		if err := a.guestCall(ctx, mc, http.MethodGet, guestapi.PathHarness, nil, &hs); err != nil {
			return resp, failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read harness event seq of session %s: %w", sid, err))
		}
		harnessSeq = &hs.LastSeq
	}
	snap, err := mc.m.Snapshot(ctx, tmp)
	if err != nil {
		a.continueAfterSnapshot(ctx, log, mc)
		status := http.StatusInternalServerError
		if errors.Is(err, vmm.ErrUnsupported) {
			status = http.StatusNotImplemented
		}
		return resp, failure(status, hostlink.CodeSnapshotFailed, fmt.Errorf("capture machine of session %s: %w", sid, err))
	}
	a.mu.Lock()
	parent := mc.memParent
	a.mu.Unlock()
	manifests, put, err := a.upload(ctx, snap, parent)
	var raw []byte
	if err == nil {
		raw, err = a.withShared(ctx, sid, manifests)
	}
	if err != nil {
		a.continueAfterSnapshot(ctx, log, mc)
		return resp, failure(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed,
			fmt.Errorf("upload snapshot %s of session %s: %w", req.SnapshotID, sid, err))
	}
	a.rememberSnapshot(req.SnapshotID, manifests)
	a.mu.Lock()
	mc.memParent = manifests[roleMemory]
	a.mu.Unlock()
	if req.Destroy {
		a.destroyAfterSnapshot(ctx, log, mc)
	} else {
		a.continueAfterSnapshot(ctx, log, mc)
	}
	return hostlink.SnapshotResponse{
		SnapshotID: req.SnapshotID,
		Manifests:  raw,
		Facts:      a.facts(),
		Bytes:      put.Bytes,
		Uploaded:   put.StoredBytes,
		OutboxSeq:  outbox.Applied,
		HarnessSeq: harnessSeq,
		DurationMS: a.deps.Now().Sub(start).Milliseconds(),
	}, nil
}

// upload chunks every file of snap: memory with the memory store (changed
// chunks as deltas over memParent, the memory of the machine's previous
// snapshot), the rest with the disk store. It returns role -> manifest and
// the summed stats.
func (a *Agent) upload(ctx context.Context, snap vmm.Snapshot, memParent chunk.Manifest) (map[string]chunk.Manifest, chunk.PutStats, error) {
	var total chunk.PutStats
	if len(snap.Files) == 0 {
		return nil, total, errors.New("the backend wrote no snapshot files")
	}
	manifests := make(map[string]chunk.Manifest, len(snap.Files))
	for _, role := range slices.Sorted(maps.Keys(snap.Files)) {
		if !validSessionID(role) {
			return nil, total, fmt.Errorf("snapshot role %q: not a plain name", role)
		}
		store, parent := a.deps.DiskChunks, chunk.Manifest{}
		if role == roleMemory {
			store, parent = a.deps.MemoryChunks, memParent
		}
		m, st, err := putSnapshotFile(ctx, store, snap.Files[role], parent)
		if err != nil {
			return nil, total, fmt.Errorf("role %s: %w", role, err)
		}
		m.Role = role
		manifests[role] = m
		total.Add(st)
	}
	return manifests, total, nil
}

// continueAfterSnapshot resumes mc after a snapshot (kept or failed), or
// leaves it paused if the lease expired meanwhile. A machine that cannot
// be resumed is reported paused; reconcile retries. Callers hold the
// session lock.
func (a *Agent) continueAfterSnapshot(ctx context.Context, log *slog.Logger, mc *machine) {
	if a.leaseExpired() {
		a.pauseLocked(ctx, mc, "lease expired during a snapshot")
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	if err := mc.m.Resume(rctx); err != nil {
		log.Error("resume after snapshot failed; reporting the machine paused until a retry resumes it", "error", err)
		a.setPaused(mc, true)
	}
}

// destroyAfterSnapshot destroys mc once its state is uploaded. If that
// keeps failing, the machine (paused by the snapshot) is reported exited,
// so reconcile or the next start destroys it. Callers hold the session
// lock.
func (a *Agent) destroyAfterSnapshot(ctx context.Context, log *slog.Logger, mc *machine) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlLimit)
	defer cancel()
	var err error
	for range destroyAttempts {
		if err = a.destroy(dctx, mc.sessionID, "snapshot uploaded"); err == nil {
			return
		}
	}
	log.Error("destroy after snapshot failed; the paused machine is reported exited until reconciled", "error", err)
	a.mu.Lock()
	mc.exited = true
	a.mu.Unlock()
}
