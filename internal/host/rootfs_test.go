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
	if !strings.HasPrefix(spec.RootFS.Path, filepath.Join(e.dir, "shared-disks")+"/") {
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

// putDisk stores size bytes (one non-zero chunk) as a shared disk through
// a store over the env's blobs and returns its manifest JSON.
func putDisk(t *testing.T, e *snapEnv, size int) json.RawMessage {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b[:4096])
	p := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, _, err := openChunks(t, e.ch.dir, "", 1<<30).disk.PutFile(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(m)
	return raw
}

func lastSpecHarness(e *snapEnv) string {
	e.w.mu.Lock()
	defer e.w.mu.Unlock()
	if h := e.w.specs[len(e.w.specs)-1].Harness; h != nil {
		return h.ID + " " + h.Path
	}
	return ""
}

// TestHarnessAttachedAtBootKeptAcrossResumeReplacedAtBaseRestore: a boot
// with a harness attaches it; the session's snapshot names it, so a resume
// attaches it again; a base restore takes the harness of its request.
func TestHarnessAttachedAtBootKeptAcrossResumeReplacedAtBaseRestore(t *testing.T) {
	t.Parallel()
	e := newSnapEnv(t, true)
	e.w.set(func(w *world) { w.harness = true })
	v1, v2 := putDisk(t, e, 1<<20), putDisk(t, e, 2<<20)
	e.c.setOwned(hostlink.Ownership{SessionID: "s2", Epoch: 1})
	if status, body := e.c.do(t, http.MethodPut, "/v1/machines/s2", 1,
		hostlink.StartRequest{Epoch: 1, Spec: hostlink.MachineSpec{MemoryMiB: 256}, Harness: v1}); status != http.StatusOK {
		t.Fatalf("boot with a harness: %d %s", status, body)
	}
	first := lastSpecHarness(e)
	if !strings.HasSuffix(first, ".erofs") || !strings.Contains(first, filepath.Join(e.dir, "shared-disks")) {
		t.Fatalf("harness attached as %q", first)
	}
	e.c.setOwned(hostlink.Ownership{SessionID: "s2", Epoch: 2})
	status, body := e.c.do(t, http.MethodPost, "/v1/machines/s2/snapshot", 2, hostlink.SnapshotRequest{Epoch: 2, SnapshotID: "h-1", Destroy: true})
	var snap hostlink.SnapshotResponse
	if status != http.StatusOK || json.Unmarshal(body, &snap) != nil {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	var ms map[string]chunk.Manifest
	_ = json.Unmarshal(snap.Manifests, &ms)
	if ms[hostlink.RoleHarness].Role != hostlink.RoleHarness {
		t.Fatalf("snapshot names no harness: %v", ms)
	}
	e.c.setOwned(hostlink.Ownership{SessionID: "s2", Epoch: 3})
	if status, body := e.c.do(t, http.MethodPut, "/v1/machines/s2", 3, hostlink.StartRequest{Epoch: 3,
		Spec: hostlink.MachineSpec{MemoryMiB: 256}, Restore: &hostlink.RestoreSpec{SnapshotID: "h-1", Manifests: snap.Manifests}}); status != http.StatusOK {
		t.Fatalf("resume: %d %s", status, body)
	}
	if got := lastSpecHarness(e); got != first {
		t.Fatalf("resume attached %q, want the session's own %q", got, first)
	}
	// A base restore (a new session from the same state) takes its request's harness.
	e.c.setOwned(hostlink.Ownership{SessionID: "s2", Epoch: 3}, hostlink.Ownership{SessionID: "s3", Epoch: 1})
	if status, body := e.c.do(t, http.MethodPut, "/v1/machines/s3", 1, hostlink.StartRequest{Epoch: 1,
		Spec: hostlink.MachineSpec{MemoryMiB: 256}, Harness: v2,
		Restore: &hostlink.RestoreSpec{SnapshotID: "h-1", Manifests: snap.Manifests, Base: true}}); status != http.StatusOK {
		t.Fatalf("base restore: %d %s", status, body)
	}
	if got := lastSpecHarness(e); got == first || !strings.HasSuffix(got, ".erofs") {
		t.Fatalf("base restore attached %q, want the request's harness (not %q)", got, first)
	}
	// A backend without harness disks refuses one.
	e.w.set(func(w *world) { w.harness = false })
	e.c.setOwned(hostlink.Ownership{SessionID: "s2", Epoch: 3}, hostlink.Ownership{SessionID: "s3", Epoch: 1}, hostlink.Ownership{SessionID: "s4", Epoch: 1})
	if status, body := e.c.do(t, http.MethodPut, "/v1/machines/s4", 1,
		hostlink.StartRequest{Epoch: 1, Spec: hostlink.MachineSpec{MemoryMiB: 256}, Harness: v1}); status != http.StatusNotImplemented {
		t.Fatalf("harness on a backend without harness disks: %d %s", status, body)
	}
}

// TestUnusedSharedDisksPrunedAtStart: a restarted agent removes shared
// disk files no machine names (and partial ones); a machine's stay.
func TestUnusedSharedDisksPrunedAtStart(t *testing.T) {
	t.Parallel()
	e := newSnapEnv(t, true)
	e.w.set(func(w *world) { w.harness = true })
	v1 := putDisk(t, e, 1<<20)
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1}, hostlink.Ownership{SessionID: "s2", Epoch: 1})
	if status, body := e.c.do(t, http.MethodPut, "/v1/machines/s2", 1,
		hostlink.StartRequest{Epoch: 1, Spec: hostlink.MachineSpec{MemoryMiB: 256}, Harness: v1}); status != http.StatusOK {
		t.Fatalf("boot with a harness: %d %s", status, body)
	}
	dir := filepath.Join(e.dir, "shared-disks")
	for _, junk := range []string{"0123.erofs", ".0123.partial"} {
		if err := os.WriteFile(filepath.Join(dir, junk), []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	inUse := strings.TrimPrefix(lastSpecHarness(e), "sha256:")
	inUse = inUse[strings.IndexByte(inUse, ' ')+1:]
	e.stop()
	runAgentWith(t, e.url, e.dir, e.w, e.ch.wire)
	recv(t, e.c.registers, nil)
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || filepath.Join(dir, left[0].Name()) != inUse {
		var names []string
		for _, l := range left {
			names = append(names, l.Name())
		}
		t.Fatalf("after restart %s holds %v, want only the running machine's %s", dir, names, filepath.Base(inUse))
	}
}
