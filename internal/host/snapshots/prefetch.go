package snapshots

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
)

// Prefetch: heartbeat answers list the base snapshots of enabled images
// this host could restore. Run fetches their chunks into the cache and
// builds their root filesystems in the background, one at a time, then
// lists them as cached, so placement prefers this host for their sessions.

// prefetchRetry is how long a failed prefetch waits before it is tried again.
const prefetchRetry = time.Minute

type prefetcher struct {
	kick chan struct{} // wakes Run

	mu     sync.Mutex
	queue  []hostlink.Prefetch
	failed map[string]time.Time // snapshot id -> when it last failed
}

// Prefetch queues the listed snapshots not cached, queued or recently
// failed, for Run.
func (s *Snapshots) Prefetch(list []hostlink.Prefetch) {
	if len(list) == 0 || s.deps.DiskChunks == nil || s.deps.ChunkCache == nil || !s.deps.Backend.Capabilities().RootFS {
		return
	}
	cached := s.Cached()
	p := &s.pf
	p.mu.Lock()
	defer p.mu.Unlock()
	now := s.deps.Now()
	for _, f := range list {
		queued := slices.ContainsFunc(p.queue, func(q hostlink.Prefetch) bool { return q.SnapshotID == f.SnapshotID })
		if queued || slices.Contains(cached, f.SnapshotID) || now.Sub(p.failed[f.SnapshotID]) < prefetchRetry || !hostfs.ValidName(f.SnapshotID) {
			continue
		}
		p.queue = append(p.queue, f)
	}
	if len(p.queue) > 0 {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Run fetches what Prefetch queued, one snapshot at a time, until ctx
// ends.
func (s *Snapshots) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.pf.kick:
		}
		s.drainPrefetch(ctx)
	}
}

// drainPrefetch fetches queued snapshots until the queue is empty or ctx
// ends (which drops the queue).
func (s *Snapshots) drainPrefetch(ctx context.Context) {
	p := &s.pf
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || ctx.Err() != nil {
			p.queue = nil
			p.mu.Unlock()
			return
		}
		f := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		t0 := s.deps.Now()
		err := s.prefetchOne(ctx, f)
		log := s.log.With("image_id", f.ImageID, "snapshot_id", f.SnapshotID)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("prefetch image failed; will retry", "err", err)
			}
			p.mu.Lock()
			if p.failed == nil {
				p.failed = map[string]time.Time{}
			}
			p.failed[f.SnapshotID] = s.deps.Now()
			p.mu.Unlock()
			continue
		}
		log.Info("image prefetched", "ms", s.deps.Now().Sub(t0).Milliseconds())
	}
}

// prefetchOne fetches every chunk of f into the cache, builds its root
// filesystem, and lists it as cached.
func (s *Snapshots) prefetchOne(ctx context.Context, f hostlink.Prefetch) error {
	all, err := decodeManifests(f.Manifests)
	if err != nil {
		return fmt.Errorf("prefetch %s: %w", f.SnapshotID, err)
	}
	manifests, shared := splitShared(all)
	for role, m := range shared {
		if _, err := s.shared.disk(ctx, role, m); err != nil {
			return fmt.Errorf("prefetch %s: %w", f.SnapshotID, err)
		}
	}
	for _, role := range slices.Sorted(maps.Keys(manifests)) {
		if err := s.storeFor(role).VerifyData(ctx, manifests[role]); err != nil {
			return fmt.Errorf("prefetch %s, role %s: %w", f.SnapshotID, role, err)
		}
	}
	s.cached.remember(f.SnapshotID, manifests)
	return nil
}
