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

// Shared disks: an image's root filesystem (role rootfs) and a harness
// bundle (role harness) are read-only files, one per content under
// DataDir/shared-disks/<id><suffix>, shared by every machine using them (a root
// filesystem gets a copy-on-write layer per machine). A machine keeps the
// manifest of each in its dir (<role>.json), so its snapshots name them too.
const imagesDir = "shared-disks" // not "images": the QEMU backend caches its boot images there

// sharedRoles are the manifest roles of shared disks, in a fixed order.
var sharedRoles = []string{hostlink.RoleRootFS, hostlink.RoleHarness}

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
func (a *Agent) supports(role string) error {
	c := a.deps.Backend.Capabilities()
	switch {
	case role == hostlink.RoleRootFS && !c.RootFS:
		return failure(501, hostlink.CodeUnsupported, fmt.Errorf("backend %s cannot boot an image's root filesystem", c.Name))
	case role == hostlink.RoleHarness && !c.Harness:
		return failure(501, hostlink.CodeUnsupported, fmt.Errorf("backend %s cannot attach a harness bundle", c.Name))
	}
	return nil
}

// sharedDisk returns the shared file of role's disk m, building it from
// verified chunks on first use (atomically: a crash leaves no partial file
// under its final name).
func (a *Agent) sharedDisk(ctx context.Context, role string, m chunk.Manifest) (*vmm.RootFS, error) {
	if err := a.supports(role); err != nil {
		return nil, err
	}
	id, err := sharedID(m)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(a.cfg.DataDir, imagesDir)
	p := filepath.Join(dir, id+sharedSuffix(role))
	unlock := a.imageLocks.lock(id)
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
	if err := a.deps.DiskChunks.Restore(ctx, m, tmp); err != nil {
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
	a.log.Info("shared disk ready", "role", role, "disk_id", id, "bytes", m.Size)
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

// attachShared stages every shared disk of sid's machine, records them in
// its dir and sets them on spec.
func (a *Agent) attachShared(ctx context.Context, sid string, shared map[string]chunk.Manifest, spec *vmm.Spec) error {
	for _, role := range sharedRoles {
		m, ok := shared[role]
		if !ok {
			continue
		}
		disk, err := a.sharedDisk(ctx, role, m)
		if err != nil {
			return err
		}
		b, err := m.Encode()
		if err == nil {
			err = writeFileSync(a.machineDir(sid), role+".json", b)
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

// machineShared returns the manifest of sid's machine's shared disk of
// role, if it has one.
func (a *Agent) machineShared(sid, role string) (*chunk.Manifest, error) {
	b, err := os.ReadFile(filepath.Join(a.machineDir(sid), role+".json"))
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

// withShared adds sid's shared disks to a snapshot's manifests, after
// putting their chunks again from this host's copies: the put uploads only
// chunks the blob store lacks (or holds too old to rely on), and GC keeps
// only the chunks of live images and of snapshots, while a session can
// outlive its image being disabled.
func (a *Agent) withShared(ctx context.Context, sid string, manifests map[string]chunk.Manifest) (json.RawMessage, error) {
	for _, role := range sharedRoles {
		m, err := a.machineShared(sid, role)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		if err := a.putShared(ctx, role, *m); err != nil {
			return nil, err
		}
		m.Role = role
		manifests[role] = *m
	}
	return json.Marshal(manifests)
}

// putShared puts the chunks of role's shared disk m from this host's copy.
func (a *Agent) putShared(ctx context.Context, role string, m chunk.Manifest) error {
	id, err := sharedID(m)
	if err != nil {
		return err
	}
	p := filepath.Join(a.cfg.DataDir, imagesDir, id+sharedSuffix(role))
	again, st, err := a.deps.DiskChunks.PutFile(ctx, p)
	if err != nil {
		return fmt.Errorf("store %s %s: %w", role, id, err)
	}
	if got, _ := sharedID(again); got != id {
		return fmt.Errorf("store %s %s: this host's copy chunks to %s", role, id, got)
	}
	if st.Uploaded > 0 {
		a.log.Warn("shared disk chunks were missing from the blob store; stored them again", "role", role, "disk_id", id, "chunks", st.Uploaded)
	}
	return nil
}

// pruneShared removes the shared disk files no machine on this host names
// (run at start, after machines are recovered and before any starts): a
// later restore or prefetch that needs one builds it again from chunks.
func (a *Agent) pruneShared() {
	used := map[string]bool{}
	dirs, _ := os.ReadDir(filepath.Join(a.cfg.DataDir, machinesDir))
	for _, d := range dirs {
		for _, role := range sharedRoles {
			m, err := a.machineShared(d.Name(), role)
			if err != nil || m == nil {
				continue
			}
			if id, err := sharedID(*m); err == nil {
				used[id+sharedSuffix(role)] = true
			}
		}
	}
	dir := filepath.Join(a.cfg.DataDir, imagesDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if used[e.Name()] || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			a.log.Warn("remove unused shared disk", "file", e.Name(), "error", err)
			continue
		}
		a.log.Info("removed an unused shared disk", "file", e.Name())
	}
}
