package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Local captures. A capture's files go to <machine dir>/snapshot-<snapshot
// id>/. Once the backend has written them all (Machine.Snapshot
// returned), every file is fsynced and then the marker complete.json is
// written atomically and fsynced: from then on the dir is a complete
// local snapshot, the capture's state exactly and durably. A restarted
// agent finishes uploading it when the coordinator's retried command
// asks for that snapshot id, instead of capturing again or reporting the
// machine lost. The marker is removed (durably) before the machine is
// resumed, since a file may share storage with the live machine (QEMU's
// memory is its RAM file): a marker present means the files are still
// what the capture wrote. A capture dir without a marker is partial and
// is removed.
const (
	localPrefix = "snapshot-"
	localMarker = "complete.json"
)

// Local is a complete local capture.
type Local struct {
	SnapshotID string            `json:"snapshot_id"`
	Epoch      int64             `json:"epoch"` // of the command that took it
	Backend    string            `json:"backend"`
	Files      map[string]string `json:"files"` // role -> name inside the capture dir
	Taken      time.Time         `json:"taken"`
	OutboxSeq  int64             `json:"outbox_seq"`
	HarnessSeq *int64            `json:"harness_seq,omitempty"`
}

// Quiesced is what a capture's guest had applied when it was paused.
type Quiesced struct {
	OutboxSeq  int64
	HarnessSeq *int64
}

// LocalDir is the capture dir of snapshotID inside machineDir.
func LocalDir(machineDir, snapshotID string) string {
	return filepath.Join(machineDir, localPrefix+snapshotID)
}

// NewLocalDir makes an empty capture dir for snapshotID in machineDir,
// replacing what an earlier attempt left there.
func NewLocalDir(machineDir, snapshotID string) (string, error) {
	if !hostfs.ValidName(snapshotID) {
		return "", fmt.Errorf("capture dir: bad snapshot id %q", snapshotID)
	}
	dir := LocalDir(machineDir, snapshotID)
	if err := removeLocal(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("capture dir: %w", err)
	}
	return dir, nil
}

// markComplete fsyncs every file of snap (written into dir) and then
// writes the marker: l with the files named relative to dir.
func markComplete(dir string, snap vmm.Snapshot, l Local) error {
	l.Backend, l.Taken, l.Files = snap.Backend, snap.Taken, map[string]string{}
	for role, p := range snap.Files {
		rel, err := filepath.Rel(dir, p)
		if err != nil || !filepath.IsLocal(rel) {
			return fmt.Errorf("mark capture complete: file %s of role %s is not inside %s", p, role, dir)
		}
		if err := syncTree(p); err != nil {
			return fmt.Errorf("mark capture complete: %w", err)
		}
		l.Files[role] = rel
	}
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("mark capture complete: %w", err)
	}
	if err := hostfs.WriteFileSync(dir, localMarker, b); err != nil {
		return fmt.Errorf("mark capture complete: %w", err)
	}
	return nil
}

// syncTree fsyncs the file at p, or every file and directory under it.
func syncTree(p string) error {
	return filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(q)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", q, err)
		}
		return nil
	})
}

// snapshot is the vmm.Snapshot l describes, its files under dir.
func (l Local) snapshot(dir string) vmm.Snapshot {
	snap := vmm.Snapshot{Backend: l.Backend, Taken: l.Taken, Files: map[string]string{}}
	for role, name := range l.Files {
		snap.Files[role] = filepath.Join(dir, name)
	}
	return snap
}

// readLocal reads the marker of the capture dir dir.
func readLocal(dir string) (Local, bool) {
	var l Local
	b, err := os.ReadFile(filepath.Join(dir, localMarker))
	if err != nil || json.Unmarshal(b, &l) != nil || localPrefix+l.SnapshotID != filepath.Base(dir) || len(l.Files) == 0 {
		return Local{}, false
	}
	for _, name := range l.Files {
		if !filepath.IsLocal(name) {
			return Local{}, false
		}
	}
	return l, true
}

// FindLocal returns the complete capture in machineDir, if there is one,
// and removes every partial one (partial reports whether there was any).
// There is at most one capture per machine at a time; of several complete
// ones (an agent that predates this) the newest is kept.
func FindLocal(machineDir string) (l *Local, partial bool) {
	ents, _ := os.ReadDir(machineDir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), localPrefix) {
			continue
		}
		dir := filepath.Join(machineDir, e.Name())
		found, ok := readLocal(dir)
		if ok && (l == nil || found.Taken.After(l.Taken)) {
			if l != nil {
				_ = removeLocal(LocalDir(machineDir, l.SnapshotID))
			}
			l = &found
			continue
		}
		partial = partial || !ok
		_ = removeLocal(dir)
	}
	return l, partial
}

// LocalFor is the complete capture of snapshotID in machineDir, if any.
func LocalFor(machineDir, snapshotID string) (Local, bool) {
	if !hostfs.ValidName(snapshotID) {
		return Local{}, false
	}
	return readLocal(LocalDir(machineDir, snapshotID))
}

// DropLocal removes every capture dir in machineDir, each marker first
// and durably: call it before the machine is resumed.
func DropLocal(machineDir string) error {
	ents, _ := os.ReadDir(machineDir)
	var errs []error
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), localPrefix) {
			errs = append(errs, removeLocal(filepath.Join(machineDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removeLocal removes the capture dir dir: its marker first (fsynced), so
// a crash midway leaves a partial capture, never a complete-looking one
// with files missing.
func removeLocal(dir string) error {
	err := os.Remove(filepath.Join(dir, localMarker))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("remove capture %s: %w", dir, err)
	default:
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove capture %s: %w", dir, err)
	}
	return nil
}

// LocalKeep names what a machine dir must keep for its complete capture
// l to be uploaded after the machine is gone: the capture dir and the
// records of the machine's shared disks.
func LocalKeep(l Local) []string {
	keep := []string{localPrefix + l.SnapshotID}
	for _, role := range sharedRoles {
		keep = append(keep, role+".json")
	}
	return keep
}

// UploadLocal uploads the complete capture l of sid's machine (dir
// machineDir), as Take does once the files are written. It returns only
// after every chunk is stored; the files stay until DropLocal.
func (s *Snapshots) UploadLocal(ctx context.Context, sid, machineDir string, l Local) (Taken, error) {
	snap := l.snapshot(LocalDir(machineDir, l.SnapshotID))
	for _, role := range slices.Sorted(maps.Keys(snap.Files)) {
		if _, err := os.Lstat(snap.Files[role]); err != nil {
			return Taken{}, failure.New(http.StatusNotFound, hostlink.CodeNotFound,
				fmt.Errorf("local snapshot %s of session %s: role %s: %w", l.SnapshotID, sid, role, err))
		}
	}
	return s.uploadTaken(ctx, sid, l.SnapshotID, machineDir, snap, chunk.Manifest{}, nil)
}
