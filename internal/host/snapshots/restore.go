package snapshots

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
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

const restoredDir = "restored" // inside a machine dir: the files a restore rebuilt

// Restore is the restore of a snapshot into a new machine of a session.
type Restore struct {
	SessionID string
	Dir       string   // the machine dir
	Spec      vmm.Spec // all but the shared disks, which the restore sets
	Snapshot  *hostlink.RestoreSpec
	Harness   json.RawMessage // a harness bundle manifest replacing the snapshot's; may be empty
	// Record is called once the files are in place, before the VMM
	// starts: the machine record a restarted agent recovers it from.
	Record func() error
	// Clean is called on a failure after Dir was created.
	Clean func()
}

// Restore rebuilds a snapshot's files from verified chunks and starts a
// machine from them. Every chunk is checked to exist before anything is
// written, and every chunk's hash while it is written: a missing or
// corrupt snapshot is refused before the VMM starts. It also returns the
// snapshot's memory manifest, which the next snapshot stores its changed
// memory chunks over.
func (s *Snapshots) Restore(ctx context.Context, r Restore) (vmm.Machine, chunk.Manifest, error) {
	m, manifests, err := s.restore(ctx, r)
	if err != nil {
		return nil, chunk.Manifest{}, err
	}
	return m, manifests[roleMemory], nil
}

func (s *Snapshots) restore(ctx context.Context, r Restore) (m vmm.Machine, manifests map[string]chunk.Manifest, err error) {
	sid, rs := r.SessionID, r.Snapshot
	if !hostfs.ValidName(rs.SnapshotID) {
		return nil, nil, failure.New(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("bad snapshot id %q", rs.SnapshotID))
	}
	all, err := decodeManifests(rs.Manifests)
	if err != nil {
		return nil, nil, snapshotFailure(fmt.Sprintf("restore snapshot %s of session %s", rs.SnapshotID, sid), err)
	}
	manifests, shared := splitShared(all)
	wsMan, hasWS := manifests[roleWorkingSet]
	delete(manifests, roleWorkingSet)
	if err := AddHarness(shared, r.Harness); err != nil {
		return nil, nil, err
	}
	for _, role := range slices.Sorted(maps.Keys(manifests)) {
		if err := s.storeFor(role).Verify(ctx, manifests[role]); err != nil {
			return nil, nil, snapshotFailure(fmt.Sprintf("verify snapshot %s of session %s, role %s", rs.SnapshotID, sid, role), err)
		}
	}
	files := filepath.Join(r.Dir, restoredDir)
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create machine dir of session %s: %w", sid, err)
	}
	defer func() {
		if err != nil {
			r.Clean()
		}
	}()
	if err := os.RemoveAll(files); err != nil {
		return nil, nil, fmt.Errorf("clear restore dir of session %s: %w", sid, err)
	}
	if err := os.Mkdir(files, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create restore dir of session %s: %w", sid, err)
	}
	vspec := r.Spec
	vspec.Rebind = rs.Base
	if err := s.AttachShared(ctx, sid, r.Dir, shared, &vspec); err != nil {
		return nil, nil, err
	}
	snap := vmm.Snapshot{Backend: s.deps.Backend.Capabilities().Name, Files: map[string]string{}, Taken: s.deps.Now()}
	served, lerr := s.serveLazily(ctx, sid, r.Dir, manifests, wsMan, hasWS, &snap)
	if lerr != nil {
		return nil, nil, lerr
	}
	if served {
		defer func() { // err: this function's result
			if err != nil {
				s.DropMemory(sid)
			}
		}()
	}
	for role, man := range manifests {
		p := filepath.Join(files, role)
		if snap.ServedMemory && role == roleMemory {
			continue
		}
		if err := restoreSnapshotFile(ctx, s.storeFor(role), man, p); err != nil {
			return nil, nil, snapshotFailure(fmt.Sprintf("fetch snapshot %s of session %s, role %s", rs.SnapshotID, sid, role), err)
		}
		snap.Files[role] = p
	}
	if err := r.Record(); err != nil {
		return nil, nil, fmt.Errorf("record machine of session %s: %w", sid, err)
	}
	m, err = s.deps.Backend.Restore(ctx, vspec, snap)
	if err != nil {
		err = fmt.Errorf("restore snapshot %s of session %s: %w", rs.SnapshotID, sid, err)
		if errors.Is(err, vmm.ErrUnsupported) {
			return nil, nil, failure.New(http.StatusNotImplemented, hostlink.CodeUnsupported, err)
		}
		return nil, nil, failure.New(http.StatusInternalServerError, hostlink.CodeRestoreFailed, err)
	}
	s.cached.remember(rs.SnapshotID, manifests)
	return m, manifests, nil
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
		if !hostfs.ValidName(role) {
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
		return failure.New(http.StatusUnprocessableEntity, hostlink.CodeSnapshotCorrupt, err)
	case errors.Is(err, chunk.ErrMissing):
		return failure.New(http.StatusUnprocessableEntity, hostlink.CodeSnapshotMissing, err)
	}
	return failure.New(http.StatusServiceUnavailable, hostlink.CodeUnavailable, err)
}

// AddHarness puts the harness manifest of a start request (if any) into
// shared, replacing the one a snapshot named.
func AddHarness(shared map[string]chunk.Manifest, harness json.RawMessage) error {
	if len(harness) == 0 {
		return nil
	}
	m, err := chunk.Decode(harness)
	if err != nil {
		return failure.New(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("harness manifest: %w", err))
	}
	shared[hostlink.RoleHarness] = m
	return nil
}
