package snapshots

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/vmm"
)

// fakeCache is a chunk cache that holds the chunks it is told to.
type fakeCache struct {
	mu   sync.Mutex
	held map[string]bool
}

func (c *fakeCache) Has(h string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[h]
}

func (c *fakeCache) put(hs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hs {
		c.held[h] = true
	}
}

func (c *fakeCache) evict(hs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hs {
		delete(c.held, h)
	}
}

// hashOf is the chunk hash standing for name.
func hashOf(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// snapshotChunks are the chunks of the test snapshot id: one every
// snapshot shares and one of its own.
func snapshotChunks(id string) []string { return []string{hashOf("shared"), hashOf(id)} }

// manifestsOf is a snapshot of the given chunks, with a zero chunk and a
// repeat, as the agent gets them from a snapshot or a restore.
func manifestsOf(hashes []string) map[string]chunk.Manifest {
	refs := []chunk.Ref{chunk.ZeroRef()}
	for _, h := range hashes {
		refs = append(refs, chunk.Ref{Hash: h}, chunk.Ref{Hash: h})
	}
	return map[string]chunk.Manifest{"memory": {Version: chunk.ManifestVersion, Role: "memory", Chunks: refs}}
}

// newCaching is the snapshot parts over dir, whose heartbeats report the
// snapshots cache holds whole.
func newCaching(dir string, cache *fakeCache) *Snapshots {
	return New(Config{DataDir: dir}, Deps{Backend: stubBackend{}, ChunkCache: cache})
}

// recordFiles lists the cached snapshot record files under dir.
func recordFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, cachedSnapshotsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func writeRecord(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, cachedSnapshotsDir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCachedSnapshotsAcrossRestart: a restarted agent on the same data dir
// reports the snapshots its predecessor cached, most recent first, but
// only those the chunk cache still holds whole, and deletes the records
// of the others.
func TestCachedSnapshotsAcrossRestart(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range maxCachedSnapshots + 6 {
		many = append(many, fmt.Sprintf("s%02d", i))
	}
	newestFirst := slices.Clone(many)
	slices.Reverse(newestFirst)
	type change func(t *testing.T, cache *fakeCache, dir string)
	evict := func(name string) change { // the chunk standing for name
		return func(_ *testing.T, c *fakeCache, _ string) { c.evict(hashOf(name)) }
	}
	record := func(file, content string) change {
		return func(t *testing.T, _ *fakeCache, dir string) { writeRecord(t, dir, file, content) }
	}
	tests := []struct {
		name     string
		remember []string // in this order, by the first agent
		between  change   // while no agent runs
		want     []string // reported by the restarted agent
	}{
		{name: "all held", remember: []string{"s1", "s2"}, want: []string{"s2", "s1"}},
		{name: "remembered again: most recent", remember: []string{"s1", "s2", "s3", "s1"}, want: []string{"s1", "s3", "s2"}},
		{name: "a chunk of one evicted", remember: []string{"s1", "s2"}, between: evict("s1"), want: []string{"s2"}},
		{name: "a shared chunk evicted", remember: []string{"s1", "s2"}, between: evict("shared"), want: nil},
		{name: "unreadable record", remember: []string{"s1", "s2"},
			between: record("s2", `{"id":"s2","seq":`), want: []string{"s1"}},
		{name: "record naming another snapshot", remember: []string{"s1"},
			between: record("s9", `{"id":"s1","seq":7,"chunks":[]}`), want: []string{"s1"}},
		{name: "bad chunk hash", remember: []string{"s1", "s2"},
			between: record("s1", `{"id":"s1","seq":1,"chunks":["zz"]}`), want: []string{"s2"}},
		{name: "interrupted write", remember: []string{"s1"},
			between: record(".s2.tmp123", `{"id":"s2"`), want: []string{"s1"}},
		{name: "bounded", remember: many, want: newestFirst[:maxCachedSnapshots]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, cache := t.TempDir(), &fakeCache{held: map[string]bool{}}
			first := newCaching(dir, cache)
			first.LoadCached() // nothing yet
			for _, id := range tt.remember {
				cache.put(snapshotChunks(id)...) // a snapshot or restore fills the cache first
				first.cached.remember(id, manifestsOf(snapshotChunks(id)))
			}
			if tt.between != nil {
				tt.between(t, cache, dir)
			}

			second := newCaching(dir, cache)
			second.LoadCached()
			if got := second.Cached(); !slices.Equal(got, tt.want) {
				t.Fatalf("after a restart: reported %q, want %q", got, tt.want)
			}
			if got, want := recordFiles(t, dir), slices.Sorted(slices.Values(tt.want)); !slices.Equal(got, want) {
				t.Errorf("record files %q, want %q", got, want)
			}

			// Remembering goes on after the loaded records, across another restart.
			cache.put(hashOf("fresh"))
			second.cached.remember("fresh", manifestsOf([]string{hashOf("fresh")}))
			third := newCaching(dir, cache)
			third.LoadCached()
			want := append([]string{"fresh"}, tt.want...)
			want = want[:min(len(want), maxCachedSnapshots)]
			if got := third.Cached(); !slices.Equal(got, want) {
				t.Errorf("after a second restart: reported %q, want %q", got, want)
			}
		})
	}
}

// stubBackend boots nothing.
type stubBackend struct{}

func (stubBackend) Capabilities() vmm.Capabilities { return vmm.Capabilities{Name: "stub"} }
func (stubBackend) Boot(context.Context, vmm.Spec) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}
func (stubBackend) Restore(context.Context, vmm.Spec, vmm.Snapshot) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}
func (stubBackend) Recover(context.Context, string) (vmm.Machine, error) { return nil, vmm.ErrGone }
