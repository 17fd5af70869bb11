package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/pager"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Lazy memory: with a Pager and a backend that maps memory in place, a
// restore serves the snapshot's memory through the pager instead of
// rebuilding it, the VM starts at once, and the working set the snapshot
// recorded is fetched ahead. A capture of such a machine reads only the
// chunks written since (pager.File.Changed) and records the chunks the
// guest touched as the next working set.
const (
	roleWorkingSet = "workingset"     // the chunks the guest touched, first-touch order (pager.EncodeWorkingSet)
	overlayFile    = "memory.overlay" // in a machine dir: the pager's local chunks; its presence marks a lazy machine
	// maxWorkingSetBytes bounds the working set file a restore reads.
	maxWorkingSetBytes = 4 << 20
	// prefetchParallel is how many chunks a lazy restore fetches ahead at once.
	prefetchParallel = 32
)

// Pager serves lazily restored memory (*pager.Pager does).
type Pager interface {
	Add(name, overlay string, m chunk.Manifest, src pager.Source) (*pager.File, error)
	Remove(name string)
}

// lazyFiles are the served memories of this agent's machines, by session.
type lazyFiles struct {
	mu    sync.Mutex
	files map[string]*pager.File
}

func (l *lazyFiles) get(sid string) *pager.File {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.files[sid]
}

func (l *lazyFiles) set(sid string, f *pager.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[string]*pager.File{}
	}
	l.files[sid] = f
}

func (l *lazyFiles) take(sid string) *pager.File {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.files[sid]
	delete(l.files, sid)
	return f
}

// lazy reports whether a restore serves memory m through the pager: a
// pager runs, the backend maps memory in place, and m is in the memory
// store's chunks (a capture stores the changed ones over it).
func (s *Snapshots) lazy(m chunk.Manifest) bool {
	return s.deps.Pager != nil && s.deps.Backend.Capabilities().LazyMemory && m.ChunkSize == chunk.MemoryChunkSize
}

// IsLazy reports whether the machine dir holds a lazily served memory's
// overlay: its memory lived in the agent that served it, so a restarted
// agent cannot adopt the machine.
func IsLazy(machineDir string) bool {
	_, err := os.Lstat(filepath.Join(machineDir, overlayFile))
	return err == nil
}

// LazyStats reports sid's served memory, if it has one.
func (s *Snapshots) LazyStats(sid string) (pager.Stats, bool) {
	f := s.lazyFiles.get(sid)
	if f == nil {
		return pager.Stats{}, false
	}
	return f.Stats(), true
}

// serveMemory serves m as sid's memory from an overlay in dir.
func (s *Snapshots) serveMemory(sid, dir string, m chunk.Manifest) (*pager.File, error) {
	f, err := s.deps.Pager.Add(sid, filepath.Join(dir, overlayFile), m, s.deps.MemoryChunks)
	if err != nil {
		return nil, fmt.Errorf("serve memory of session %s: %w", sid, err)
	}
	s.lazyFiles.set(sid, f)
	return f, nil
}

// serveLazily serves a restore's memory through the pager where it may
// (lazy), reading the snapshot's working set first; it reports whether
// it did. It first drops an overlay an earlier machine in dir left, which
// would mark this one lazy.
func (s *Snapshots) serveLazily(ctx context.Context, sid, dir string, manifests map[string]chunk.Manifest,
	wsMan chunk.Manifest, hasWS bool, snap *vmm.Snapshot) (bool, error) {
	if err := os.Remove(filepath.Join(dir, overlayFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("clear memory overlay of session %s: %w", sid, err)
	}
	mem, ok := manifests[roleMemory]
	if !ok || !s.lazy(mem) {
		return false, nil
	}
	var ws []int
	if hasWS {
		ws = s.workingSet(ctx, wsMan, mem)
	}
	return true, s.serveRestored(sid, dir, mem, ws, snap)
}

// serveRestored serves mem as the memory of sid's restore into snap and
// starts fetching it ahead, the working set ws first.
func (s *Snapshots) serveRestored(sid, dir string, mem chunk.Manifest, ws []int, snap *vmm.Snapshot) error {
	f, err := s.serveMemory(sid, dir, mem)
	if err != nil {
		return failure.New(http.StatusInternalServerError, hostlink.CodeRestoreFailed, err)
	}
	go s.prefetch(sid, f, ws)
	snap.Files[roleMemory], snap.ServedMemory = f.Path(), true
	return nil
}

// DropMemory stops serving sid's memory, if it was served; call it once
// the machine's VMM is gone (destroyed, or failed to start).
func (s *Snapshots) DropMemory(sid string) {
	if f := s.lazyFiles.take(sid); f != nil {
		s.deps.Pager.Remove(sid)
	}
}

// prefetch fetches f's chunks ahead: the working set first. It runs
// until every chunk is local or the file is dropped.
func (s *Snapshots) prefetch(sid string, f *pager.File, ws []int) {
	start := s.deps.Now()
	err := f.Prefetch(context.Background(), ws, prefetchParallel)
	st := f.Stats()
	attrs := []any{"session_id", sid, "working_set", len(ws), "chunks", st.Chunks, "local", st.Local,
		"demand", st.Demand, "prefetched", st.Prefetch, "duration", s.deps.Now().Sub(start)}
	if err != nil && s.lazyFiles.get(sid) == f {
		s.log.Warn("lazy memory prefetch incomplete", append(attrs, "err", err)...)
		return
	}
	s.log.Debug("lazy memory prefetched", attrs...)
}

// workingSet reads the working set a snapshot recorded (nil when it has
// none or it cannot be read: the prefetch then goes in address order).
func (s *Snapshots) workingSet(ctx context.Context, m, mem chunk.Manifest) []int {
	if m.Size > maxWorkingSetBytes {
		s.log.Warn("working set too large; prefetching in address order", "bytes", m.Size)
		return nil
	}
	b := make([]byte, m.Size)
	var err error
	for i := 0; i < len(m.Chunks) && err == nil; i++ {
		off := int64(i) * m.ChunkSize
		err = s.deps.DiskChunks.ReadChunk(ctx, m, i, b[off:off+m.ChunkLen(i)])
	}
	if err == nil {
		var ws []int
		if ws, err = pager.DecodeWorkingSet(b, len(mem.Chunks)); err == nil {
			return ws
		}
	}
	s.log.Warn("working set unreadable; prefetching in address order", "err", err)
	return nil
}

// putLazyMemory captures a served memory: the guest's dirty pages
// written back, then only the chunks written since the file's manifest
// read and stored; the rest keep their refs (or are filled and stored
// again where the blob store no longer holds them fresh). The caller
// rebases the file on the result once the whole snapshot is stored.
func (s *Snapshots) putLazyMemory(ctx context.Context, f *pager.File) (chunk.Manifest, chunk.PutStats, error) {
	if err := f.Sync(ctx); err != nil {
		return chunk.Manifest{}, chunk.PutStats{}, err
	}
	return s.deps.MemoryChunks.PutChanged(ctx, f.Overlay(), f.Manifest(), f.Changed(), f.Fill)
}

// putWorkingSet stores the chunks f's guest touched as a snapshot's
// working set.
func (s *Snapshots) putWorkingSet(ctx context.Context, f *pager.File) (chunk.Manifest, chunk.PutStats, error) {
	b := pager.EncodeWorkingSet(f.Touched())
	m, st, err := s.deps.DiskChunks.PutReader(ctx, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return m, st, fmt.Errorf("store working set: %w", err)
	}
	return m, st, nil
}
