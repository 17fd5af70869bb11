package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Prefetch: heartbeat answers list the base snapshots of enabled images
// this host could restore. The agent fetches their chunks into its cache
// and builds their root filesystems in the background, one at a time, then
// lists them as cached, so placement prefers this host for their sessions.

// prefetchRetry is how long a failed prefetch waits before it is tried again.
const prefetchRetry = time.Minute

type prefetchState struct {
	mu      sync.Mutex
	running bool
	queue   []hostlink.Prefetch
	failed  map[string]time.Time // snapshot id -> when it last failed
}

// startPrefetch queues the listed snapshots not cached, queued or recently
// failed, and starts the fetcher if it is idle.
func (a *Agent) startPrefetch(ctx context.Context, list []hostlink.Prefetch) {
	if len(list) == 0 || a.deps.DiskChunks == nil || a.deps.ChunkCache == nil || !a.deps.Backend.Capabilities().RootFS {
		return
	}
	cached := a.cachedSnapshots()
	p := &a.prefetch
	p.mu.Lock()
	defer p.mu.Unlock()
	now := a.deps.Now()
	for _, f := range list {
		queued := slices.ContainsFunc(p.queue, func(q hostlink.Prefetch) bool { return q.SnapshotID == f.SnapshotID })
		if queued || slices.Contains(cached, f.SnapshotID) || now.Sub(p.failed[f.SnapshotID]) < prefetchRetry || !validSessionID(f.SnapshotID) {
			continue
		}
		p.queue = append(p.queue, f)
	}
	if p.running || len(p.queue) == 0 {
		return
	}
	p.running = true
	a.watchers.Add(1)
	go func() {
		defer a.watchers.Done()
		a.runPrefetch(ctx)
	}()
}

// runPrefetch fetches queued snapshots until the queue is empty or ctx ends.
func (a *Agent) runPrefetch(ctx context.Context) {
	p := &a.prefetch
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || ctx.Err() != nil {
			p.running = false
			p.queue = nil
			p.mu.Unlock()
			return
		}
		f := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		t0 := a.deps.Now()
		err := a.prefetchOne(ctx, f)
		log := a.log.With("image_id", f.ImageID, "snapshot_id", f.SnapshotID)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("prefetch image failed; will retry", "error", err)
			}
			p.mu.Lock()
			if p.failed == nil {
				p.failed = map[string]time.Time{}
			}
			p.failed[f.SnapshotID] = a.deps.Now()
			p.mu.Unlock()
			continue
		}
		log.Info("image prefetched", "ms", a.deps.Now().Sub(t0).Milliseconds())
	}
}

// prefetchOne fetches every chunk of f into the cache, builds its root
// filesystem, and lists it as cached.
func (a *Agent) prefetchOne(ctx context.Context, f hostlink.Prefetch) error {
	all, err := decodeManifests(f.Manifests)
	if err != nil {
		return fmt.Errorf("prefetch %s: %w", f.SnapshotID, err)
	}
	manifests, shared := splitShared(all)
	for role, m := range shared {
		if _, err := a.sharedDisk(ctx, role, m); err != nil {
			return fmt.Errorf("prefetch %s: %w", f.SnapshotID, err)
		}
	}
	for _, role := range slices.Sorted(maps.Keys(manifests)) {
		if err := a.storeFor(role).VerifyData(ctx, manifests[role]); err != nil {
			return fmt.Errorf("prefetch %s, role %s: %w", f.SnapshotID, role, err)
		}
	}
	a.rememberSnapshot(f.SnapshotID, manifests)
	return nil
}

// clearCaptures destroys what image captures a previous agent left (the
// coordinator retries their jobs) and removes their dirs.
func (a *Agent) clearCaptures(ctx context.Context) {
	root := filepath.Join(a.cfg.DataDir, captureDir)
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		m, err := a.deps.Backend.Recover(ctx, dir)
		switch {
		case err == nil:
			if derr := m.Destroy(ctx); derr != nil {
				a.log.Warn("destroy leftover capture machine", "dir", dir, "error", derr)
				continue
			}
		case !errors.Is(err, vmm.ErrGone):
			a.log.Warn("leftover capture machine not recovered", "dir", dir, "error", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			a.log.Warn("remove leftover capture dir", "dir", dir, "error", err)
		}
	}
}
