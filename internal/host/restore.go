package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

const restoredDir = "restored" // inside a machine dir: the files a restore rebuilt

// restore rebuilds a snapshot's files from verified chunks and starts a
// machine from them. Every chunk is checked to exist before anything is
// written, and every chunk's hash while it is written: a missing or
// corrupt snapshot is refused before the VMM starts. Callers hold the
// session lock and have reserved capacity.
// It also returns the snapshot's memory manifest, which the next snapshot
// stores its changed memory chunks over.
func (a *Agent) restore(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, rs *hostlink.RestoreSpec, harness json.RawMessage) (vmm.Machine, chunk.Manifest, error) {
	m, manifests, err := a.restoreFiles(ctx, sid, epoch, spec, rs, harness)
	if err != nil {
		return nil, chunk.Manifest{}, err
	}
	return m, manifests[roleMemory], nil
}

func (a *Agent) restoreFiles(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, rs *hostlink.RestoreSpec, harness json.RawMessage) (m vmm.Machine, manifests map[string]chunk.Manifest, err error) {
	if !validSessionID(rs.SnapshotID) {
		return nil, nil, failure(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("bad snapshot id %q", rs.SnapshotID))
	}
	all, err := decodeManifests(rs.Manifests)
	if err != nil {
		return nil, nil, snapshotFailure(fmt.Sprintf("restore snapshot %s of session %s", rs.SnapshotID, sid), err)
	}
	manifests, shared := splitShared(all)
	if err := addHarness(shared, harness); err != nil {
		return nil, nil, err
	}
	for _, role := range slices.Sorted(maps.Keys(manifests)) {
		if err := a.storeFor(role).Verify(ctx, manifests[role]); err != nil {
			return nil, nil, snapshotFailure(fmt.Sprintf("verify snapshot %s of session %s, role %s", rs.SnapshotID, sid, role), err)
		}
	}
	dir := a.machineDir(sid)
	files := filepath.Join(dir, restoredDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create machine dir of session %s: %w", sid, err)
	}
	defer func() {
		if err != nil {
			_ = cleanMachineDir(dir)
		}
	}()
	if err := os.RemoveAll(files); err != nil {
		return nil, nil, fmt.Errorf("clear restore dir of session %s: %w", sid, err)
	}
	if err := os.Mkdir(files, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create restore dir of session %s: %w", sid, err)
	}
	vspec := vmm.Spec{SessionID: sid, Epoch: epoch, Dir: dir, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: sessionEnv(sid, spec.Env), Rebind: rs.Base}
	if err := a.attachShared(ctx, sid, shared, &vspec); err != nil {
		return nil, nil, err
	}
	snap := vmm.Snapshot{Backend: a.deps.Backend.Capabilities().Name, Files: map[string]string{}, Taken: a.deps.Now()}
	for role, man := range manifests {
		p := filepath.Join(files, role)
		if err := restoreSnapshotFile(ctx, a.storeFor(role), man, p); err != nil {
			return nil, nil, snapshotFailure(fmt.Sprintf("fetch snapshot %s of session %s, role %s", rs.SnapshotID, sid, role), err)
		}
		snap.Files[role] = p
	}
	if err := a.writeRecord(sid, epoch, spec, false); err != nil {
		return nil, nil, fmt.Errorf("record machine of session %s: %w", sid, err)
	}
	m, err = a.deps.Backend.Restore(ctx, vspec, snap)
	if err != nil {
		err = fmt.Errorf("restore snapshot %s of session %s: %w", rs.SnapshotID, sid, err)
		if errors.Is(err, vmm.ErrUnsupported) {
			return nil, nil, failure(http.StatusNotImplemented, hostlink.CodeUnsupported, err)
		}
		return nil, nil, failure(http.StatusInternalServerError, hostlink.CodeRestoreFailed, err)
	}
	a.rememberSnapshot(rs.SnapshotID, manifests)
	return m, manifests, nil
}

func (a *Agent) storeFor(role string) ChunkStore {
	if role == roleMemory {
		return a.deps.MemoryChunks
	}
	return a.deps.DiskChunks
}

// decodeManifests parses role -> manifest, strictly.
func decodeManifests(b json.RawMessage) (map[string]chunk.Manifest, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("decode manifests: %w: %w", chunk.ErrInvalidManifest, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("decode manifests: %w: no files", chunk.ErrInvalidManifest)
	}
	out := make(map[string]chunk.Manifest, len(raw))
	for role, r := range raw {
		if !validSessionID(role) {
			return nil, fmt.Errorf("decode manifests: %w: role %q is not a plain name", chunk.ErrInvalidManifest, role)
		}
		m, err := chunk.Decode(r)
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", role, err)
		}
		out[role] = m
	}
	return out, nil
}

// snapshotFailure maps a chunk failure to its answer: missing and corrupt
// snapshots are final (422), anything else may pass (503).
func snapshotFailure(action string, err error) error {
	err = fmt.Errorf("%s: %w", action, err)
	switch {
	case errors.Is(err, chunk.ErrCorrupt), errors.Is(err, chunk.ErrInvalidManifest):
		return failure(http.StatusUnprocessableEntity, hostlink.CodeSnapshotCorrupt, err)
	case errors.Is(err, chunk.ErrMissing):
		return failure(http.StatusUnprocessableEntity, hostlink.CodeSnapshotMissing, err)
	}
	return failure(http.StatusServiceUnavailable, hostlink.CodeUnavailable, err)
}
