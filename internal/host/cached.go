package host

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/engrams/engrams/internal/chunk"
)

// Cached snapshots. Heartbeats name the snapshots whose every chunk the
// per-host chunk cache holds, so placement prefers this host for their
// resume. The agent remembers the chunks of the snapshots it took or
// restored last, in memory and in one record file per snapshot under
// DataDir/cached-snapshots, so a restarted agent names them again. The
// cache evicts by LRU on its own, so nothing is trusted: a snapshot is
// named only while the cache holds each of its chunks (checked at every
// heartbeat), and at start the records of snapshots no longer held whole
// are deleted.

const (
	cachedSnapshotsDir = "cached-snapshots"
	maxCachedSnapshots = 64 // remembered and reported, most recent first
)

// recentSnapshots remembers the chunks of the snapshots this host took or
// restored last.
type recentSnapshots struct {
	write sync.Mutex // held while remembering: record files follow the list
	seq   uint64     // guarded by write; the newest record's seq

	mu   sync.Mutex
	list []recentSnapshot // most recent first
}

type recentSnapshot struct {
	id     string
	hashes [][32]byte // distinct non-zero chunks
}

// cachedRecord is the file remembering one snapshot's chunks.
type cachedRecord struct {
	ID     string   `json:"id"`
	Seq    uint64   `json:"seq"`    // order of remembering; higher is newer
	Chunks []string `json:"chunks"` // distinct non-zero chunk hashes
}

func (a *Agent) cachedDir() string { return filepath.Join(a.cfg.DataDir, cachedSnapshotsDir) }

// rememberSnapshot records that the cache was filled with the chunks of
// snapshot id (just taken or restored). A record that cannot be written is
// logged: the snapshot is still reported until the agent restarts.
func (a *Agent) rememberSnapshot(id string, manifests map[string]chunk.Manifest) {
	if a.deps.ChunkCache == nil {
		return
	}
	hashes := distinctChunks(manifests)
	c := &a.cached
	c.write.Lock()
	defer c.write.Unlock()
	c.seq++
	rec := cachedRecord{ID: id, Seq: c.seq, Chunks: make([]string, len(hashes))}
	for i, h := range hashes {
		rec.Chunks[i] = hex.EncodeToString(h[:])
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = writeFileSync(a.cachedDir(), id, b)
	}
	if err != nil {
		a.log.Warn("persist cached snapshot record; a restarted agent will not report it",
			"snapshot_id", id, "error", err)
	}
	c.mu.Lock()
	c.list = slices.DeleteFunc(c.list, func(s recentSnapshot) bool { return s.id == id })
	c.list = slices.Insert(c.list, 0, recentSnapshot{id: id, hashes: hashes})
	var dropped []recentSnapshot
	if len(c.list) > maxCachedSnapshots {
		dropped = slices.Clone(c.list[maxCachedSnapshots:])
		clear(c.list[maxCachedSnapshots:])
		c.list = c.list[:maxCachedSnapshots]
	}
	c.mu.Unlock()
	for _, s := range dropped {
		a.forgetCachedRecord(s.id)
	}
}

// distinctChunks lists the distinct non-zero chunks of manifests.
func distinctChunks(manifests map[string]chunk.Manifest) [][32]byte {
	seen := map[[32]byte]bool{}
	var hashes [][32]byte
	for _, m := range manifests {
		for _, r := range m.Chunks {
			var h [32]byte
			if r.IsZero() {
				continue
			}
			if _, err := hex.Decode(h[:], []byte(r.Hash)); err != nil || seen[h] {
				continue
			}
			seen[h] = true
			hashes = append(hashes, h)
		}
	}
	return hashes
}

// cachedSnapshots lists, most recent first, the remembered snapshots whose
// every chunk the cache holds.
func (a *Agent) cachedSnapshots() []string {
	if a.deps.ChunkCache == nil {
		return nil
	}
	c := &a.cached
	c.mu.Lock()
	list := slices.Clone(c.list)
	c.mu.Unlock()
	var ids []string
	for _, s := range list {
		if a.cacheHolds(s.hashes) {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// cacheHolds reports whether the chunk cache holds every one of hashes.
func (a *Agent) cacheHolds(hashes [][32]byte) bool {
	for _, h := range hashes {
		if !a.deps.ChunkCache.Has(hex.EncodeToString(h[:])) {
			return false
		}
	}
	return true
}

// loadCachedSnapshots reads the records a previous agent left. It keeps
// the newest maxCachedSnapshots of the snapshots the cache still holds
// whole and deletes every other record (chunks evicted, unreadable, or
// beyond the bound). Run calls it before the agent reports anything.
func (a *Agent) loadCachedSnapshots() {
	if a.deps.ChunkCache == nil {
		return
	}
	dir := a.cachedDir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		a.log.Warn("list cached snapshot records; reporting only new ones", "error", err)
		return
	}
	var (
		kept    []cachedRecord
		lists   = map[string][][32]byte{}
		newest  uint64
		evicted int
	)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp") { // an interrupted write
			a.forgetCachedRecord(name)
			continue
		}
		if !validSessionID(name) {
			continue
		}
		rec, hashes, err := readCachedRecord(dir, name)
		if err != nil {
			a.log.Warn("cached snapshot record unreadable; forgetting it", "snapshot_id", name, "error", err)
			a.forgetCachedRecord(name)
			continue
		}
		newest = max(newest, rec.Seq)
		if !a.cacheHolds(hashes) {
			evicted++
			a.forgetCachedRecord(name)
			continue
		}
		kept = append(kept, rec)
		lists[rec.ID] = hashes
	}
	slices.SortFunc(kept, func(x, y cachedRecord) int {
		return cmp.Or(cmp.Compare(y.Seq, x.Seq), strings.Compare(x.ID, y.ID))
	})
	if len(kept) > maxCachedSnapshots {
		for _, rec := range kept[maxCachedSnapshots:] {
			a.forgetCachedRecord(rec.ID)
		}
		kept = kept[:maxCachedSnapshots]
	}
	list := make([]recentSnapshot, len(kept))
	for i, rec := range kept {
		list[i] = recentSnapshot{id: rec.ID, hashes: lists[rec.ID]}
	}
	c := &a.cached
	c.write.Lock()
	c.seq = max(c.seq, newest)
	c.mu.Lock()
	c.list = list
	c.mu.Unlock()
	c.write.Unlock()
	a.log.Info("loaded cached snapshot records", "cached_snapshots", len(list), "evicted", evicted)
}

// readCachedRecord reads and checks the record of snapshot id.
func readCachedRecord(dir, id string) (cachedRecord, [][32]byte, error) {
	var rec cachedRecord
	b, err := os.ReadFile(filepath.Join(dir, id))
	if err != nil {
		return rec, nil, fmt.Errorf("read cached snapshot record %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, nil, fmt.Errorf("decode cached snapshot record %s: %w", id, err)
	}
	if rec.ID != id {
		return rec, nil, fmt.Errorf("decode cached snapshot record %s: it names snapshot %q", id, rec.ID)
	}
	hashes := make([][32]byte, len(rec.Chunks))
	for i, s := range rec.Chunks {
		if len(s) != 2*len(hashes[i]) {
			return rec, nil, fmt.Errorf("decode cached snapshot record %s: chunk %d: bad hash %.80q", id, i, s)
		}
		if _, err := hex.Decode(hashes[i][:], []byte(s)); err != nil {
			return rec, nil, fmt.Errorf("decode cached snapshot record %s: chunk %d: %w", id, i, err)
		}
	}
	return rec, hashes, nil
}

// forgetCachedRecord deletes the record file of snapshot id.
func (a *Agent) forgetCachedRecord(id string) {
	if err := os.Remove(filepath.Join(a.cachedDir(), id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("delete cached snapshot record", "snapshot_id", id, "error", err)
	}
}
