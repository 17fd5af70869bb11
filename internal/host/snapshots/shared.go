package snapshots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/keyed"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Shared disks: an image's root filesystem (role rootfs) and a harness
// bundle (role harness) are read-only files, one per content under
// DataDir/shared-disks/<id><suffix>, shared by every machine using them (a root
// filesystem gets a copy-on-write layer per machine). A machine keeps the
// manifest of each in its dir (<role>.json), so its snapshots name them too.
const imagesDir = "shared-disks" // not "images": the QEMU backend caches its boot images there

// sharedRoles are the manifest roles of shared disks, in a fixed order.
var sharedRoles = []string{hostlink.RoleRootFS, hostlink.RoleHarness}

// sharedDisks builds, records and prunes the shared disk files.
type sharedDisks struct {
	dataDir string
	backend vmm.Backend
	store   ChunkStore // Deps.DiskChunks
	log     *slog.Logger
	locks   keyed.Mutex // one per shared disk
}

// sharedSuffix is the file name suffix of role's shared disks.
func sharedSuffix(role string) string {
	if role == hostlink.RoleHarness {
		return ".erofs"
	}
	return ".ext4"
}

// sharedID names a shared disk by its manifest: the same chunks in the
// same order are the same bytes.
func sharedID(m chunk.Manifest) (string, error) {
	m.Name, m.Role = "", ""
	b, err := m.Encode()
	if err != nil {
		return "", fmt.Errorf("encode shared disk manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// supports says whether the backend can attach role's shared disks.
func (d *sharedDisks) supports(role string) error {
	c := d.backend.Capabilities()
	switch {
	case role == hostlink.RoleRootFS && !c.RootFS:
		return failure.New(501, hostlink.CodeUnsupported, fmt.Errorf("backend %s cannot boot an image's root filesystem", c.Name))
	case role == hostlink.RoleHarness && !c.Harness:
		return failure.New(501, hostlink.CodeUnsupported, fmt.Errorf("backend %s cannot attach a harness bundle", c.Name))
	}
	return nil
}

// disk returns the shared file of role's disk m, building it from
// verified chunks on first use (atomically: a crash leaves no partial file
// under its final name).
func (d *sharedDisks) disk(ctx context.Context, role string, m chunk.Manifest) (*vmm.RootFS, error) {
	if err := d.supports(role); err != nil {
		return nil, err
	}
	id, err := sharedID(m)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(d.dataDir, imagesDir)
	p := filepath.Join(dir, id+sharedSuffix(role))
	unlock := d.locks.Lock(id)
	defer unlock()
	if _, err := os.Stat(p); err == nil {
		return &vmm.RootFS{Path: p, ID: "sha256:" + id}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s %s: %w", role, id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s %s: %w", role, id, err)
	}
	tmp := filepath.Join(dir, "."+id+".partial")
	_ = os.Remove(tmp)
	if err := d.store.Restore(ctx, m, tmp); err != nil {
		_ = os.Remove(tmp)
		return nil, snapshotFailure(fmt.Sprintf("fetch %s %s", role, id), err)
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("%s %s: %w", role, id, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("%s %s: %w", role, id, err)
	}
	d.log.Info("shared disk ready", "role", role, "disk_id", id, "bytes", m.Size)
	return &vmm.RootFS{Path: p, ID: "sha256:" + id}, nil
}

// splitShared takes the shared disks out of a snapshot's manifests.
func splitShared(manifests map[string]chunk.Manifest) (rest, shared map[string]chunk.Manifest) {
	rest, shared = make(map[string]chunk.Manifest, len(manifests)), map[string]chunk.Manifest{}
	for role, m := range manifests {
		if isShared(role) {
			shared[role] = m
		} else {
			rest[role] = m
		}
	}
	return rest, shared
}

func isShared(role string) bool {
	return role == hostlink.RoleRootFS || role == hostlink.RoleHarness
}

// AttachShared stages every shared disk of sid's machine, records them in
// its dir and sets them on spec.
func (s *Snapshots) AttachShared(ctx context.Context, sid, dir string, shared map[string]chunk.Manifest, spec *vmm.Spec) error {
	for _, role := range sharedRoles {
		m, ok := shared[role]
		if !ok {
			continue
		}
		disk, err := s.shared.disk(ctx, role, m)
		if err != nil {
			return err
		}
		b, err := m.Encode()
		if err == nil {
			err = hostfs.WriteFileSync(dir, role+".json", b)
		}
		if err != nil {
			return fmt.Errorf("record %s of session %s: %w", role, sid, err)
		}
		if role == hostlink.RoleRootFS {
			spec.RootFS = disk
		} else {
			spec.Harness = disk
		}
	}
	return nil
}

// machineShared returns the manifest of the shared disk of role recorded
// in the machine dir dir, if it has one; sid names the session in errors.
func machineShared(sid, dir, role string) (*chunk.Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, role+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of session %s: %w", role, sid, err)
	}
	m, err := chunk.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("read %s of session %s: %w", role, sid, err)
	}
	return &m, nil
}

// withShared adds the shared disks of sid's machine (dir) to a snapshot's
// manifests, after putting their chunks again from this host's copies:
// the put uploads only chunks the blob store lacks (or holds too old to
// rely on), and GC keeps only the chunks of live images and of snapshots,
// while a session can outlive its image being disabled.
func (d *sharedDisks) withShared(ctx context.Context, sid, dir string, manifests map[string]chunk.Manifest) (json.RawMessage, error) {
	for _, role := range sharedRoles {
		m, err := machineShared(sid, dir, role)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		if err := d.put(ctx, role, *m); err != nil {
			return nil, err
		}
		m.Role = role
		manifests[role] = *m
	}
	return json.Marshal(manifests)
}

// put puts the chunks of role's shared disk m from this host's copy.
func (d *sharedDisks) put(ctx context.Context, role string, m chunk.Manifest) error {
	id, err := sharedID(m)
	if err != nil {
		return err
	}
	p := filepath.Join(d.dataDir, imagesDir, id+sharedSuffix(role))
	again, st, err := d.store.PutFile(ctx, p)
	if err != nil {
		return fmt.Errorf("store %s %s: %w", role, id, err)
	}
	if got, _ := sharedID(again); got != id {
		return fmt.Errorf("store %s %s: this host's copy chunks to %s", role, id, got)
	}
	if st.Uploaded > 0 {
		d.log.Warn("shared disk chunks were missing from the blob store; stored them again", "role", role, "disk_id", id, "chunks", st.Uploaded)
	}
	return nil
}

// PruneShared removes the shared disk files no machine dir of machineDirs
// names (run at start, after machines are recovered and before any
// starts): a later restore or prefetch that needs one builds it again
// from chunks.
func (s *Snapshots) PruneShared(machineDirs []string) {
	used := map[string]bool{}
	for _, md := range machineDirs {
		for _, role := range sharedRoles {
			m, err := machineShared(filepath.Base(md), md, role)
			if err != nil || m == nil {
				continue
			}
			if id, err := sharedID(*m); err == nil {
				used[id+sharedSuffix(role)] = true
			}
		}
	}
	dir := filepath.Join(s.cfg.DataDir, imagesDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if used[e.Name()] || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			s.log.Warn("remove unused shared disk", "file", e.Name(), "err", err)
			continue
		}
		s.log.Info("removed an unused shared disk", "file", e.Name())
	}
}
