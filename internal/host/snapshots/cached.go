package snapshots

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host/hostfs"
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

// cachedSnapshots remembers the chunks of the snapshots this host took or
// restored last. With no cache, it remembers and reports nothing.
type cachedSnapshots struct {
	dataDir string
	cache   ChunkCache
	log     *slog.Logger

	write sync.Mutex // held while remembering: record files follow the list
	seq   uint64     // guarded by write; the newest record's seq

	mu   sync.Mutex
	recs []recentSnapshot // most recent first
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

func (c *cachedSnapshots) dir() string { return filepath.Join(c.dataDir, cachedSnapshotsDir) }

// remember records that the cache was filled with the chunks of snapshot
// id (just taken or restored). A record that cannot be written is logged:
// the snapshot is still reported until the agent restarts.
func (c *cachedSnapshots) remember(id string, manifests map[string]chunk.Manifest) {
	if c.cache == nil {
		return
	}
	hashes := distinctChunks(manifests)
	c.write.Lock()
	defer c.write.Unlock()
	c.seq++
	rec := cachedRecord{ID: id, Seq: c.seq, Chunks: make([]string, len(hashes))}
	for i, h := range hashes {
		rec.Chunks[i] = hex.EncodeToString(h[:])
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = hostfs.WriteFileSync(c.dir(), id, b)
	}
	if err != nil {
		c.log.Warn("persist cached snapshot record; a restarted agent will not report it",
			"snapshot_id", id, "err", err)
	}
	c.mu.Lock()
	c.recs = slices.DeleteFunc(c.recs, func(s recentSnapshot) bool { return s.id == id })
	c.recs = slices.Insert(c.recs, 0, recentSnapshot{id: id, hashes: hashes})
	var dropped []recentSnapshot
	if len(c.recs) > maxCachedSnapshots {
		dropped = slices.Clone(c.recs[maxCachedSnapshots:])
		clear(c.recs[maxCachedSnapshots:])
		c.recs = c.recs[:maxCachedSnapshots]
	}
	c.mu.Unlock()
	for _, s := range dropped {
		c.forgetRecord(s.id)
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

// list lists, most recent first, the remembered snapshots whose every
// chunk the cache holds.
func (c *cachedSnapshots) list() []string {
	if c.cache == nil {
		return nil
	}
	c.mu.Lock()
	recs := slices.Clone(c.recs)
	c.mu.Unlock()
	var ids []string
	for _, s := range recs {
		if c.holds(s.hashes) {
			ids = append(ids, s.id)
		}
	}
	return ids
}

// holds reports whether the chunk cache holds every one of hashes.
func (c *cachedSnapshots) holds(hashes [][32]byte) bool {
	for _, h := range hashes {
		if !c.cache.Has(hex.EncodeToString(h[:])) {
			return false
		}
	}
	return true
}

// load reads the records a previous agent left. It keeps the newest
// maxCachedSnapshots of the snapshots the cache still holds whole and
// deletes every other record (chunks evicted, unreadable, or beyond the
// bound).
func (c *cachedSnapshots) load() {
	if c.cache == nil {
		return
	}
	dir := c.dir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		c.log.Warn("list cached snapshot records; reporting only new ones", "err", err)
		return
	}
	kept, lists, newest, evicted := c.readRecords(dir, entries)
	slices.SortFunc(kept, func(x, y cachedRecord) int {
		return cmp.Or(cmp.Compare(y.Seq, x.Seq), strings.Compare(x.ID, y.ID))
	})
	if len(kept) > maxCachedSnapshots {
		for _, rec := range kept[maxCachedSnapshots:] {
			c.forgetRecord(rec.ID)
		}
		kept = kept[:maxCachedSnapshots]
	}
	recs := make([]recentSnapshot, len(kept))
	for i, rec := range kept {
		recs[i] = recentSnapshot{id: rec.ID, hashes: lists[rec.ID]}
	}
	c.write.Lock()
	c.seq = max(c.seq, newest)
	c.mu.Lock()
	c.recs = recs
	c.mu.Unlock()
	c.write.Unlock()
	c.log.Info("loaded cached snapshot records", "cached_snapshots", len(recs), "evicted", evicted)
}

// readRecords reads the record files of entries, deleting those that are
// unreadable or name chunks the cache lost.
func (c *cachedSnapshots) readRecords(dir string, entries []os.DirEntry) (kept []cachedRecord, lists map[string][][32]byte, newest uint64, evicted int) {
	lists = map[string][][32]byte{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp") { // an interrupted write
			c.forgetRecord(name)
			continue
		}
		if !hostfs.ValidName(name) {
			continue
		}
		rec, hashes, err := readCachedRecord(dir, name)
		if err != nil {
			c.log.Warn("cached snapshot record unreadable; forgetting it", "snapshot_id", name, "err", err)
			c.forgetRecord(name)
			continue
		}
		newest = max(newest, rec.Seq)
		if !c.holds(hashes) {
			evicted++
			c.forgetRecord(name)
			continue
		}
		kept = append(kept, rec)
		lists[rec.ID] = hashes
	}
	return kept, lists, newest, evicted
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

// forgetRecord deletes the record file of snapshot id.
func (c *cachedSnapshots) forgetRecord(id string) {
	if err := os.Remove(filepath.Join(c.dir(), id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("delete cached snapshot record", "snapshot_id", id, "err", err)
	}
}
