package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/pager"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Take is one snapshot of a session's machine, whose guest the caller
// has quiesced.
type Take struct {
	SessionID  string
	SnapshotID string
	Epoch      int64 // of the command taking it
	VM         vmm.Machine
	FilesDir   string         // where the backend writes the snapshot files: NewLocalDir
	MachineDir string         // names the machine's shared disks (AttachShared)
	MemParent  chunk.Manifest // memory of the machine's previous snapshot: changed chunks go as deltas over it
	Quiesced   Quiesced       // recorded with the local files, for an answer after a restart
}

// Taken is a snapshot uploaded whole.
type Taken struct {
	Manifests json.RawMessage // role -> manifest, shared disks included
	Memory    chunk.Manifest  // the next snapshot of the machine stores deltas over it
	Stats     chunk.PutStats
}

// Take pauses t.VM and writes its files (the backend leaves it paused),
// marks them a complete local capture, then uploads every chunk the store
// lacks. It returns only after every chunk is stored; the caller resumes
// (after DropLocal) or destroys the machine either way.
func (s *Snapshots) Take(ctx context.Context, t Take) (Taken, error) {
	snap, err := t.VM.Snapshot(ctx, t.FilesDir)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, vmm.ErrUnsupported) {
			status = http.StatusNotImplemented
		}
		return Taken{}, failure.New(status, hostlink.CodeSnapshotFailed, fmt.Errorf("capture machine of session %s: %w", t.SessionID, err))
	}
	lazy := s.lazyFiles.get(t.SessionID)
	l := Local{SnapshotID: t.SnapshotID, Epoch: t.Epoch, OutboxSeq: t.Quiesced.OutboxSeq, HarnessSeq: t.Quiesced.HarnessSeq}
	// A served memory is not on local disk: such a capture is never
	// complete, and a restarted agent does not adopt its machine.
	if lazy == nil {
		if err := markComplete(t.FilesDir, snap, l); err != nil {
			return Taken{}, failure.New(http.StatusInternalServerError, hostlink.CodeSnapshotFailed, fmt.Errorf("capture machine of session %s: %w", t.SessionID, err))
		}
	}
	s.deps.Checkpoint(ctx, "snapshot-written")
	taken, err := s.uploadTaken(ctx, t.SessionID, t.SnapshotID, t.MachineDir, snap, t.MemParent, lazy)
	if err == nil && lazy != nil {
		// Stored whole: the next capture stores what changes after it.
		err = lazy.Rebase(taken.Memory)
	}
	return taken, err
}

// uploadTaken uploads the files of snap, a capture of sid's machine (dir
// machineDir), with its shared disks.
func (s *Snapshots) uploadTaken(ctx context.Context, sid, snapshotID, machineDir string, snap vmm.Snapshot, memParent chunk.Manifest, lazy *pager.File) (Taken, error) {
	manifests, put, err := s.upload(ctx, snap, memParent, lazy)
	if err == nil && lazy != nil {
		var ws chunk.Manifest
		var st chunk.PutStats
		if ws, st, err = s.putWorkingSet(ctx, lazy); err == nil {
			ws.Role = roleWorkingSet
			manifests[roleWorkingSet] = ws
			put.Add(st)
		}
	}
	var raw []byte
	if err == nil {
		raw, err = s.shared.withShared(ctx, sid, machineDir, manifests)
	}
	if err != nil {
		return Taken{}, failure.New(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed,
			fmt.Errorf("upload snapshot %s of session %s: %w", snapshotID, sid, err))
	}
	s.cached.remember(snapshotID, manifests)
	return Taken{Manifests: raw, Memory: manifests[roleMemory], Stats: put}, nil
}

// upload chunks every file of snap: memory with the memory store (changed
// chunks as deltas over memParent, the memory of the machine's previous
// snapshot; of a served memory, lazy, only the chunks written since, and
// the chunks its guest touched as the working set), the rest with the
// disk store. It returns role -> manifest and the summed stats.
func (s *Snapshots) upload(ctx context.Context, snap vmm.Snapshot, memParent chunk.Manifest, lazy *pager.File) (map[string]chunk.Manifest, chunk.PutStats, error) {
	var total chunk.PutStats
	if len(snap.Files) == 0 {
		return nil, total, errors.New("the backend wrote no snapshot files")
	}
	manifests := make(map[string]chunk.Manifest, len(snap.Files))
	for _, role := range slices.Sorted(maps.Keys(snap.Files)) {
		if !hostfs.ValidName(role) {
			return nil, total, fmt.Errorf("snapshot role %q: not a plain name", role)
		}
		store, parent := s.deps.DiskChunks, chunk.Manifest{}
		if role == roleMemory {
			store, parent = s.deps.MemoryChunks, memParent
		}
		var (
			m   chunk.Manifest
			st  chunk.PutStats
			err error
		)
		if role == roleMemory && lazy != nil {
			m, st, err = s.putLazyMemory(ctx, lazy)
		} else {
			m, st, err = putSnapshotFile(ctx, store, snap.Files[role], parent)
		}
		if err != nil {
			return nil, total, fmt.Errorf("role %s: %w", role, err)
		}
		m.Role = role
		manifests[role] = m
		total.Add(st)
		if len(manifests) == 1 {
			s.deps.Checkpoint(ctx, "snapshot-uploading")
		}
	}
	return manifests, total, nil
}
