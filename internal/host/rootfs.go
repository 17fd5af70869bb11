package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Image root filesystems: one read-only file per content under
// DataDir/images/<id>.ext4, shared by every machine of the image (each has
// its own copy-on-write layer). A machine started from one keeps its
// manifest in its dir (rootfsFile), so its snapshots name it too.
const (
	imagesDir  = "images"
	rootfsFile = "rootfs.json" // inside a machine dir: the root filesystem manifest
)

// rootFSID names a root filesystem by its manifest: the same chunks in the
// same order are the same bytes.
func rootFSID(m chunk.Manifest) (string, error) {
	m.Name, m.Role = "", ""
	b, err := m.Encode()
	if err != nil {
		return "", fmt.Errorf("encode root filesystem manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// rootFS returns the shared file of root filesystem m, building it from
// verified chunks on first use (atomically: a crash leaves no partial file
// under its final name).
func (a *Agent) rootFS(ctx context.Context, m chunk.Manifest) (*vmm.RootFS, error) {
	if !a.deps.Backend.Capabilities().RootFS {
		return nil, failure(501, hostlink.CodeUnsupported,
			fmt.Errorf("backend %s cannot boot an image's root filesystem", a.deps.Backend.Capabilities().Name))
	}
	id, err := rootFSID(m)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(a.cfg.DataDir, imagesDir)
	p := filepath.Join(dir, id+".ext4")
	unlock := a.imageLocks.lock(id)
	defer unlock()
	if _, err := os.Stat(p); err == nil {
		return &vmm.RootFS{Path: p, ID: "sha256:" + id}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("root filesystem %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("root filesystem %s: %w", id, err)
	}
	tmp := filepath.Join(dir, "."+id+".partial")
	_ = os.Remove(tmp)
	if err := a.deps.DiskChunks.Restore(ctx, m, tmp); err != nil {
		_ = os.Remove(tmp)
		return nil, snapshotFailure("fetch root filesystem "+id, err)
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("root filesystem %s: %w", id, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("root filesystem %s: %w", id, err)
	}
	a.log.Info("root filesystem ready", "rootfs_id", id, "bytes", m.Size)
	return &vmm.RootFS{Path: p, ID: "sha256:" + id}, nil
}

// splitRootFS takes the root filesystem out of a snapshot's manifests.
func splitRootFS(manifests map[string]chunk.Manifest) (rest map[string]chunk.Manifest, rootfs *chunk.Manifest) {
	m, ok := manifests[hostlink.RoleRootFS]
	if !ok {
		return manifests, nil
	}
	rest = make(map[string]chunk.Manifest, len(manifests)-1)
	for role, man := range manifests {
		if role != hostlink.RoleRootFS {
			rest[role] = man
		}
	}
	return rest, &m
}

// keepRootFS records in sid's machine dir which root filesystem it runs on.
func (a *Agent) keepRootFS(sid string, m chunk.Manifest) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	return writeFileSync(a.machineDir(sid), rootfsFile, b)
}

// machineRootFS returns the root filesystem manifest sid's machine runs on,
// if it runs on an image's.
func (a *Agent) machineRootFS(sid string) (*chunk.Manifest, error) {
	b, err := os.ReadFile(filepath.Join(a.machineDir(sid), rootfsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read root filesystem of session %s: %w", sid, err)
	}
	m, err := chunk.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("read root filesystem of session %s: %w", sid, err)
	}
	return &m, nil
}

// withRootFS adds sid's root filesystem (if any) to a snapshot's manifests,
// after putting its chunks again from this host's copy: the put uploads
// only chunks the blob store lacks (or holds too old to rely on), and GC
// keeps only the chunks of live images and of snapshots, while a session
// can outlive its image being disabled.
func (a *Agent) withRootFS(ctx context.Context, sid string, manifests map[string]chunk.Manifest) (json.RawMessage, error) {
	m, err := a.machineRootFS(sid)
	if err != nil {
		return nil, err
	}
	if m != nil {
		if err := a.putRootFS(ctx, *m); err != nil {
			return nil, err
		}
		m.Role = hostlink.RoleRootFS
		manifests[hostlink.RoleRootFS] = *m
	}
	return json.Marshal(manifests)
}

// putRootFS puts the chunks of root filesystem m from this host's copy.
func (a *Agent) putRootFS(ctx context.Context, m chunk.Manifest) error {
	id, err := rootFSID(m)
	if err != nil {
		return err
	}
	p := filepath.Join(a.cfg.DataDir, imagesDir, id+".ext4")
	again, st, err := a.deps.DiskChunks.PutFile(ctx, p)
	if err != nil {
		return fmt.Errorf("store root filesystem %s: %w", id, err)
	}
	if got, _ := rootFSID(again); got != id {
		return fmt.Errorf("store root filesystem %s: this host's copy chunks to %s", id, got)
	}
	if st.Uploaded > 0 {
		a.log.Warn("root filesystem chunks were missing from the blob store; stored them again", "rootfs_id", id, "chunks", st.Uploaded)
	}
	return nil
}
