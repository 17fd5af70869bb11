package host_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
)

// storedChunks lists the stored (non-zero) chunks of a snapshot answer.
func storedChunks(t *testing.T, snap hostlink.SnapshotResponse) map[string]bool {
	t.Helper()
	var manifests map[string]chunk.Manifest
	if err := json.Unmarshal(snap.Manifests, &manifests); err != nil {
		t.Fatal(err)
	}
	hs := map[string]bool{}
	for _, m := range manifests {
		for _, r := range m.Chunks {
			if !r.IsZero() {
				hs[r.Hash] = true
			}
		}
	}
	return hs
}

// drain empties ch.
func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestCachedSnapshotsSurviveAgentRestart: an agent restarted on the same
// data dir and chunk cache reports again the snapshots its predecessor
// took, but never one whose chunks the cache evicted (while the agent ran,
// or while none did).
func TestCachedSnapshotsSurviveAgentRestart(t *testing.T) {
	t.Parallel()
	// evictFirst removes from cache the chunks of snap-1 that snap-2 lacks.
	evictFirst := func(t *testing.T, cache *chunk.Cache, snap1, snap2 hostlink.SnapshotResponse) {
		t.Helper()
		second, n := storedChunks(t, snap2), 0
		for h := range storedChunks(t, snap1) {
			if !second[h] {
				cache.Remove(h)
				n++
			}
		}
		if n == 0 {
			t.Fatal("snap-1 has no chunk of its own")
		}
	}
	type evictFunc func(t *testing.T, cache *chunk.Cache, snap1, snap2 hostlink.SnapshotResponse)
	tests := []struct {
		name    string
		running evictFunc // while the first agent runs
		stopped evictFunc // while no agent runs
		budget  int64     // of the cache the restarted agent opens
		want    []string  // reported by the restarted agent
	}{
		{name: "all cached", budget: 1 << 30, want: []string{"snap-2", "snap-1"}},
		{name: "evicted while running", running: evictFirst, budget: 1 << 30, want: []string{"snap-2"}},
		{name: "evicted while stopped", stopped: evictFirst, budget: 1 << 30, want: []string{"snap-2"}},
		{name: "budget shrunk: LRU evicts all", budget: 1, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newSnapEnv(t, true)
			// snap-1 keeps the machine; an outbox item changes its state;
			// snap-2 destroys it.
			e.c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 2})
			status, body, snap1 := e.snapshot(t, 2, "snap-1", false)
			if status != http.StatusOK {
				t.Fatalf("snapshot 1: %d %s", status, body)
			}
			if status, body, _ := e.deliver(t, 2, 1); status != http.StatusOK {
				t.Fatalf("deliver: %d %s", status, body)
			}
			status, body, snap2 := e.snapshot(t, 2, "snap-2", true)
			if status != http.StatusOK {
				t.Fatalf("snapshot 2: %d %s", status, body)
			}
			e.c.setOwned()
			before := []string{"snap-2", "snap-1"}
			if tt.running != nil {
				tt.running(t, e.ch.cache, snap1, snap2)
				before = []string{"snap-2"}
			}
			recv(t, e.c.heartbeats, func(hb hostlink.HeartbeatRequest) bool { return slices.Equal(hb.Snapshots, before) })

			e.stop()
			drain(e.c.registers)
			drain(e.c.heartbeats)
			ch := e.ch.reopen(t, tt.budget)
			if tt.stopped != nil {
				tt.stopped(t, ch.cache, snap1, snap2)
			}
			runAgentWith(t, e.url, e.dir, e.w, ch.wire)
			recv(t, e.c.registers, nil)
			// The second heartbeat after the register: a heartbeat of the
			// stopped agent still in flight can only be the first.
			recv(t, e.c.heartbeats, nil)
			if hb := recv(t, e.c.heartbeats, nil); !slices.Equal(hb.Snapshots, tt.want) {
				t.Errorf("restarted agent reports %q, want %q", hb.Snapshots, tt.want)
			}
			records, err := os.ReadDir(filepath.Join(e.dir, "cached-snapshots"))
			if err != nil {
				t.Fatal(err)
			}
			if len(records) != len(tt.want) {
				t.Errorf("%d snapshot records kept, want %d", len(records), len(tt.want))
			}
		})
	}
}
