package host_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
)

// TestBaseRestoreSharesTheRootFSAndKeepsItStored: a base snapshot naming a
// root filesystem restores with a rebound guest over the host's one shared
// copy of it; a later snapshot names it too, storing its chunks again if
// the blob store lost them.
func TestBaseRestoreSharesTheRootFSAndKeepsItStored(t *testing.T) {
	t.Parallel()
	e := newSnapEnv(t, true)
	e.w.set(func(w *world) { w.rootfs = true })
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 2})
	status, body, base := e.snapshot(t, 2, "base-1", true)
	if status != http.StatusOK {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	// An image root filesystem: 8 MiB, its second chunk non-zero.
	img := make([]byte, 8<<20)
	_, _ = rand.Read(img[4<<20 : 5<<20])
	src := filepath.Join(t.TempDir(), "rootfs.ext4")
	if err := os.WriteFile(src, img, 0o644); err != nil {
		t.Fatal(err)
	}
	// Put by the coordinator (another store over the same blobs): the
	// agent's store has no memory of these chunks being stored.
	rootfs, _, err := openChunks(t, e.ch.dir, "", 1<<30).disk.PutFile(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	var ms map[string]json.RawMessage
	if err := json.Unmarshal(base.Manifests, &ms); err != nil {
		t.Fatal(err)
	}
	ms[hostlink.RoleRootFS], _ = json.Marshal(rootfs)
	withRoot, _ := json.Marshal(ms)

	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 3})
	status, body = e.c.do(t, http.MethodPut, "/v1/machines/s1", 3, hostlink.StartRequest{
		Epoch: 3, Spec: hostlink.MachineSpec{MemoryMiB: 256, Env: map[string]string{"K": "v"}},
		Restore: &hostlink.RestoreSpec{SnapshotID: "base-1", Manifests: withRoot, Base: true},
	})
	if status != http.StatusOK {
		t.Fatalf("restore base: %d %s", status, body)
	}
	e.w.mu.Lock()
	spec := e.w.specs[len(e.w.specs)-1]
	e.w.mu.Unlock()
	if !spec.Rebind || spec.RootFS == nil || !strings.HasPrefix(spec.RootFS.ID, "sha256:") ||
		spec.Env["K"] != "v" || spec.Env["ENGRAMS_SESSION_ID"] != "s1" {
		t.Fatalf("restore spec %+v (rootfs %+v)", spec, spec.RootFS)
	}
	if got, err := os.ReadFile(spec.RootFS.Path); err != nil || !bytes.Equal(got, img) {
		t.Fatalf("shared root filesystem %s differs from the image (%v)", spec.RootFS.Path, err)
	}
	if !strings.HasPrefix(spec.RootFS.Path, filepath.Join(e.dir, "images")+"/") {
		t.Fatalf("root filesystem at %s, not in the host's image cache", spec.RootFS.Path)
	}

	// The blob store loses the root filesystem's chunk (its image was
	// disabled and collected); the session's next snapshot stores it again.
	for _, r := range rootfs.Chunks {
		if !r.IsZero() {
			if err := os.Remove(e.ch.objectPath(r.Hash)); err != nil {
				t.Fatal(err)
			}
		}
	}
	status, body, snap := e.snapshot(t, 3, "snap-2", false)
	if status != http.StatusOK {
		t.Fatalf("snapshot of a session on a root filesystem: %d %s", status, body)
	}
	var got map[string]chunk.Manifest
	if err := json.Unmarshal(snap.Manifests, &got); err != nil {
		t.Fatal(err)
	}
	if r := got[hostlink.RoleRootFS]; r.Role != hostlink.RoleRootFS || len(r.Chunks) != len(rootfs.Chunks) || r.Chunks[1] != rootfs.Chunks[1] {
		t.Fatalf("snapshot's rootfs role %+v, want the image's", r)
	}
	for _, r := range rootfs.Chunks {
		if r.IsZero() {
			continue
		}
		if _, err := os.Stat(e.ch.objectPath(r.Hash)); err != nil {
			t.Fatalf("root filesystem chunk %s not stored again: %v", r.Hash, err)
		}
	}
}
