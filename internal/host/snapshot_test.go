package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
)

// flakyBlob is a blob store whose Puts can be made to fail.
type flakyBlob struct {
	blob.Store
	failPuts atomic.Bool
}

func (f *flakyBlob) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if f.failPuts.Load() {
		return errors.New("s3: 503 slow down")
	}
	return f.Store.Put(ctx, key, r, size)
}

// chunks is a real chunk store pair over a local directory, as cmd/ wires
// it: one blob store and one cache, memory and disk chunk sizes.
type chunks struct {
	dir      string
	cacheDir string // "" = no cache
	blob     *flakyBlob
	mem      *chunk.Store
	disk     *chunk.Store
	cache    *chunk.Cache
}

func newChunks(t *testing.T, withCache bool) *chunks {
	t.Helper()
	cacheDir := ""
	if withCache {
		cacheDir = t.TempDir()
	}
	return openChunks(t, t.TempDir(), cacheDir, 1<<30)
}

// reopen opens c's blob and cache directories again, the cache with a
// budget of maxBytes, as a restarted host agent does.
func (c *chunks) reopen(t *testing.T, maxBytes int64) *chunks {
	t.Helper()
	return openChunks(t, c.dir, c.cacheDir, maxBytes)
}

// openChunks opens chunk stores over the blob directory dir and, unless
// cacheDir is empty, a cache there holding at most maxBytes.
func openChunks(t *testing.T, dir, cacheDir string, maxBytes int64) *chunks {
	t.Helper()
	c := &chunks{dir: dir, cacheDir: cacheDir}
	ld, err := localdir.New(localdir.Config{Dir: c.dir}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c.blob = &flakyBlob{Store: ld}
	deps := chunk.Deps{Blob: c.blob}
	if cacheDir != "" {
		c.cache, err = chunk.NewCache(chunk.CacheConfig{Dir: cacheDir, MaxBytes: maxBytes}, chunk.CacheDeps{})
		if err != nil {
			t.Fatal(err)
		}
		deps.Cache = c.cache
	}
	if c.mem, err = chunk.New(chunk.Config{ChunkSize: chunk.MemoryChunkSize}, deps); err != nil {
		t.Fatal(err)
	}
	if c.disk, err = chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, deps); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.mem.Close()
		c.disk.Close()
	})
	return c
}

func (c *chunks) wire(_ *host.Config, d *host.Deps) {
	d.DiskChunks, d.MemoryChunks = c.disk, c.mem
	if c.cache != nil {
		d.ChunkCache = c.cache
	}
}

// objectPath is the file holding chunk h in the local blob directory.
func (c *chunks) objectPath(h string) string {
	return filepath.Join(c.dir, filepath.FromSlash(chunk.ChunkKey(chunk.DefaultKeyPrefix, h)))
}

// snapEnv is an agent with a chunk store and one running session "s1".
type snapEnv struct {
	c    *coord
	url  string // of c
	w    *world
	ch   *chunks
	dir  string
	stop func() // stops the agent
}

func newSnapEnv(t *testing.T, withCache bool) *snapEnv {
	t.Helper()
	e := &snapEnv{c: newCoord(20 * time.Millisecond), w: newWorld(), ch: newChunks(t, withCache), dir: t.TempDir()}
	t.Cleanup(e.w.destroyAll)
	e.url = serve(t, e.c)
	e.stop = runAgentWith(t, e.url, e.dir, e.w, e.ch.wire)
	recv(t, e.c.registers, nil)
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1})
	if status, body := e.c.start(t, "s1", 1, hostlink.MachineSpec{MemoryMiB: 256}); status != http.StatusOK {
		t.Fatalf("start: %d %s", status, body)
	}
	return e
}

func (e *snapEnv) snapshot(t *testing.T, epoch int64, id string, destroy bool) (int, []byte, hostlink.SnapshotResponse) {
	t.Helper()
	status, body := e.c.do(t, http.MethodPost, "/v1/machines/s1/snapshot", epoch,
		hostlink.SnapshotRequest{Epoch: epoch, SnapshotID: id, Destroy: destroy})
	var resp hostlink.SnapshotResponse
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatalf("snapshot answer %s: %v", body, err)
		}
	}
	return status, body, resp
}

func (e *snapEnv) restore(t *testing.T, epoch int64, id string, manifests json.RawMessage) (int, []byte) {
	t.Helper()
	return e.c.do(t, http.MethodPut, "/v1/machines/s1", epoch, hostlink.StartRequest{
		Epoch: epoch, Spec: hostlink.MachineSpec{MemoryMiB: 256},
		Restore: &hostlink.RestoreSpec{SnapshotID: id, Manifests: manifests},
	})
}

func (e *snapEnv) deliver(t *testing.T, epoch int64, seqs ...int64) (int, []byte, int64) {
	t.Helper()
	d := hostlink.OutboxDelivery{Epoch: epoch}
	for _, s := range seqs {
		d.Items = append(d.Items, hostlink.OutboxItem{Seq: s, ID: "item-" + string(rune('0'+s)), Kind: "prompt"})
	}
	status, body := e.c.do(t, http.MethodPost, "/v1/machines/s1/outbox", epoch, d)
	var applied hostlink.OutboxApplied
	_ = json.Unmarshal(body, &applied)
	return status, body, applied.Applied
}

// snapshotFiles lists what is left of local snapshot files.
func snapshotFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	var left []string
	_ = filepath.WalkDir(filepath.Join(dataDir, "machines"), func(p string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), "snapshot-") || d.Name() == "memory.bin") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

func TestSnapshotDestroyRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	e := newSnapEnv(t, true)
	if status, body, applied := e.deliver(t, 1, 1, 2, 3); status != http.StatusOK || applied != 3 {
		t.Fatalf("deliver: %d %s", status, body)
	}
	m1 := e.w.machine(e.dir, "s1")
	_, journal1, mem1, _ := m1.state()

	// An evict op claims epoch 2 and snapshots with destroy.
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 2})
	status, body, snap := e.snapshot(t, 2, "snap-1", true)
	if status != http.StatusOK {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	if snap.SnapshotID != "snap-1" || snap.OutboxSeq != 3 || snap.Bytes <= 3<<20 || snap.Uploaded <= 0 ||
		snap.Uploaded >= snap.Bytes || snap.Facts.Backend.Name != "fake" {
		t.Errorf("snapshot answer = %+v", snap)
	}
	checkSnapshotManifests(t, snap.Manifests)
	if _, _, _, syncs := m1.state(); syncs != 1 || !m1.isDestroyed() {
		t.Errorf("guest synced %d times, destroyed %v; want 1, true", syncs, m1.isDestroyed())
	}
	if left := snapshotFiles(t, e.dir); len(left) != 0 {
		t.Errorf("local snapshot files left: %v", left)
	}
	// Idle: not owned; the host reports the snapshot as cached.
	e.c.setOwned()
	recv(t, e.c.heartbeats, func(hb hostlink.HeartbeatRequest) bool {
		return len(hb.Machines) == 0 && slices.Equal(hb.Snapshots, []string{"snap-1"})
	})

	// A resume op restores it at epoch 3.
	e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 3})
	status, body = e.restore(t, 3, "snap-1", snap.Manifests)
	var st hostlink.MachineStatus
	_ = json.Unmarshal(body, &st)
	if status != http.StatusOK || st.State != "running" || st.Epoch != 3 {
		t.Fatalf("restore: %d %s", status, body)
	}
	m2 := e.w.machine(e.dir, "s1")
	applied2, journal2, mem2, _ := m2.state()
	if m2 == m1 || applied2 != 3 || journal2 != journal1 || !bytes.Equal(mem2, mem1) {
		t.Fatalf("restored state: applied %d journal %q, memory equal %v", applied2, journal2, bytes.Equal(mem2, mem1))
	}
	// The outbox continues where the snapshot left it: nothing twice.
	if status, body, applied := e.deliver(t, 3, 2, 3, 4); status != http.StatusOK || applied != 4 {
		t.Fatalf("deliver after restore: %d %s", status, body)
	}
	if _, j, _, _ := m2.state(); j != "item-1,item-2,item-3,item-4" {
		t.Errorf("journal = %q", j)
	}
	// A second snapshot, kept running, uploads only what changed.
	status, body, snap2 := e.snapshot(t, 3, "snap-2", false)
	if status != http.StatusOK || snap2.OutboxSeq != 4 || snap2.Uploaded >= snap.Uploaded/2 {
		t.Fatalf("second snapshot: %d %s (first uploaded %d)", status, body, snap.Uploaded)
	}
	if m2.isDestroyed() || m2.isPaused() {
		t.Errorf("kept machine destroyed %v paused %v", m2.isDestroyed(), m2.isPaused())
	}
	recv(t, e.c.heartbeats, func(hb hostlink.HeartbeatRequest) bool {
		return machineState(hb.Machines, "s1") == "running" && slices.Equal(hb.Snapshots, []string{"snap-2", "snap-1"})
	})
	// A retried restore at the same epoch answers with the running machine.
	if status, body := e.restore(t, 3, "snap-1", snap.Manifests); status != http.StatusOK || e.w.restoreCount() != 1 {
		t.Errorf("retried restore: %d %s, %d restores", status, body, e.w.restoreCount())
	}
}

// checkSnapshotManifests checks a snapshot's manifests: memory, state and
// disk, each with its role's chunk size, and the fake guest's memory with
// only its first chunk stored, the rest zero.
func checkSnapshotManifests(t *testing.T, raw json.RawMessage) {
	t.Helper()
	var manifests map[string]chunk.Manifest
	if err := json.Unmarshal(raw, &manifests); err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string]int64{"memory": chunk.MemoryChunkSize, "state": chunk.DiskChunkSize, "disk": chunk.DiskChunkSize} {
		if m := manifests[role]; m.ChunkSize != want || m.Role != role {
			t.Errorf("%s manifest: chunk size %d role %q, want %d", role, m.ChunkSize, m.Role, want)
		}
	}
	mm := manifests["memory"]
	stored := 0
	for _, c := range mm.Chunks {
		if !c.IsZero() {
			stored++
		}
	}
	if int64(len(mm.Chunks)) != chunk.NumChunks(mm.Size, chunk.MemoryChunkSize) || mm.Chunks[0].IsZero() || stored != 1 {
		t.Errorf("memory chunks = %v, want the first stored and the rest zero", mm.Chunks)
	}
}

func TestSnapshotFailureKeepsMachineRunning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		break_ func(e *snapEnv)
		status int
		code   string
	}{
		{"upload fails", func(e *snapEnv) { e.ch.blob.failPuts.Store(true) }, http.StatusServiceUnavailable, "snapshot_failed"},
		{"capture fails", func(e *snapEnv) { e.w.set(func(w *world) { w.snapErr = errors.New("disk full") }) }, http.StatusInternalServerError, "snapshot_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newSnapEnv(t, false)
			e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 2})
			tt.break_(e)
			status, body, _ := e.snapshot(t, 2, "snap-1", true)
			wantCode(t, status, body, tt.status, tt.code)
			m := e.w.machine(e.dir, "s1")
			if m.isDestroyed() || m.isPaused() {
				t.Fatalf("after a failed snapshot: destroyed %v paused %v", m.isDestroyed(), m.isPaused())
			}
			if status, body := e.c.do(t, http.MethodGet, "/v1/machines/s1/guest/v1/ready", 2, nil); status != http.StatusOK {
				t.Errorf("guest after a failed snapshot: %d %s", status, body)
			}
			if left := snapshotFiles(t, e.dir); len(left) != 0 {
				t.Errorf("local snapshot files left: %v", left)
			}
			recv(t, e.c.heartbeats, func(hb hostlink.HeartbeatRequest) bool { return machineState(hb.Machines, "s1") == "running" })
		})
	}
}

func TestRestoreRefusesBadSnapshotBeforeTheVMM(t *testing.T) {
	t.Parallel()
	firstChunk := func(m map[string]chunk.Manifest) string { return m["memory"].Chunks[0].Hash }
	tests := []struct {
		name   string
		damage func(t *testing.T, ch *chunks, m map[string]chunk.Manifest) json.RawMessage
		code   string
	}{
		{"flipped byte", func(t *testing.T, ch *chunks, m map[string]chunk.Manifest) json.RawMessage {
			p := ch.objectPath(firstChunk(m))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 1
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "snapshot_corrupt"},
		{"deleted chunk", func(t *testing.T, ch *chunks, m map[string]chunk.Manifest) json.RawMessage {
			if err := os.Remove(ch.objectPath(firstChunk(m))); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "snapshot_missing"},
		{"bad manifest", func(*testing.T, *chunks, map[string]chunk.Manifest) json.RawMessage {
			return json.RawMessage(`{"memory":{"version":1,"chunk_size":2097152,"size":10,"chunks":[]}}`)
		}, "snapshot_corrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newSnapEnv(t, false) // no cache: every chunk comes from the blob store
			status, body, snap := e.snapshot(t, 2, "snap-1", true)
			if status != http.StatusOK {
				t.Fatalf("snapshot: %d %s", status, body)
			}
			var m map[string]chunk.Manifest
			_ = json.Unmarshal(snap.Manifests, &m)
			manifests := snap.Manifests
			if alt := tt.damage(t, e.ch, m); alt != nil {
				manifests = alt
			}
			status, body = e.restore(t, 3, "snap-1", manifests)
			wantCode(t, status, body, http.StatusUnprocessableEntity, tt.code)
			if n := e.w.restoreCount(); n != 0 {
				t.Errorf("backend Restore called %d times", n)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "machines", "s1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("machine dir left after a refused restore: %v", err)
			}
			// Nothing runs, and the refusal changed nothing but the epoch.
			status, body = e.c.do(t, http.MethodGet, hostlink.PathMachines, -1, nil)
			if status != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
				t.Errorf("machines: %d %s", status, body)
			}
		})
	}
}

func TestOutboxForwarding(t *testing.T) {
	t.Parallel()
	e := newSnapEnv(t, false)
	steps := []struct {
		epoch   int64
		seqs    []int64
		status  int
		applied int64
	}{
		{1, []int64{1, 2}, http.StatusOK, 2},
		{1, []int64{2, 3}, http.StatusOK, 3}, // 2 again: skipped, not applied twice
		{1, []int64{5}, http.StatusOK, 3},    // a gap: nothing applied
		{1, nil, http.StatusOK, 3},           // empty: reads the applied seq
		{2, []int64{4}, http.StatusOK, 4},    // a newer epoch fences the old
		{1, []int64{5}, http.StatusConflict, 0},
	}
	for i, s := range steps {
		status, body, applied := e.deliver(t, s.epoch, s.seqs...)
		if status != s.status || (status == http.StatusOK && applied != s.applied) {
			t.Fatalf("step %d: %d %s, want %d applied %d", i, status, body, s.status, s.applied)
		}
	}
	if _, j, _, _ := e.w.machine(e.dir, "s1").state(); j != "item-1,item-2,item-3,item-4" {
		t.Errorf("journal = %q", j)
	}
	status, body := e.c.do(t, http.MethodPost, "/v1/machines/nope/outbox", 1, hostlink.OutboxDelivery{Epoch: 1})
	wantCode(t, status, body, http.StatusNotFound, "not_found")
	status, body = e.c.do(t, http.MethodPost, "/v1/machines/s1/outbox", 3, hostlink.OutboxDelivery{Epoch: 2})
	wantCode(t, status, body, http.StatusBadRequest, "bad_request")
}
