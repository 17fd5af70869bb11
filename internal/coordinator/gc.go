package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
)

// GCConfig tunes chunk garbage collection.
type GCConfig struct {
	Interval  time.Duration // between passes; default 1h
	Grace     time.Duration // unreachable chunks younger than this stay; default 36h
	KeyPrefix string        // chunk key prefix in the blob store; default chunk.DefaultKeyPrefix
}

// RunGC deletes chunks no committed snapshot reaches, every Interval,
// until ctx ends. The grace period protects chunks of snapshots still
// uploading (not yet committed) and chunks a host's store re-uses without
// re-uploading for up to chunk.Config.RefreshAfter (12h by default): keep
// Grace above that plus the longest upload.
func (c *Coordinator) RunGC(ctx context.Context, bs blob.Store, cfg GCConfig) error {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 36 * time.Hour
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if st, err := c.GC(ctx, bs, cfg); err != nil && ctx.Err() == nil {
			c.log.Error("chunk gc", "err", err)
		} else if err == nil {
			c.log.Info("chunk gc", "scanned", st.Scanned, "reachable", st.Reachable, "young", st.Young, "deleted", st.Deleted, "deleted_bytes", st.DeletedBytes)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// GC is one pass: it drops the snapshot rows of terminal sessions, then
// sweeps chunks that no remaining snapshot's manifests name.
func (c *Coordinator) GC(ctx context.Context, bs blob.Store, cfg GCConfig) (chunk.SweepStats, error) {
	done, err := c.st.ListSessions(ctx, domain.SessionFilter{States: []domain.SessionState{domain.SessionCompleted, domain.SessionDead}})
	if err != nil {
		return chunk.SweepStats{}, fmt.Errorf("gc: list terminal sessions: %w", err)
	}
	for _, s := range done {
		if s.HeadSnapshotID == "" {
			continue
		}
		if err := c.st.DeleteSnapshots(ctx, s.ID); err != nil {
			return chunk.SweepStats{}, fmt.Errorf("gc: drop snapshots of session %s: %w", s.ID, err)
		}
	}
	// Read the reachable set before listing chunks: a snapshot committed
	// after this point has chunks younger than the grace period.
	live := map[string]bool{}
	err = c.st.ForEachSnapshot(ctx, func(sn domain.Snapshot) error {
		if err := chunk.MarkLiveRoles(live, sn.Manifests); err != nil {
			return fmt.Errorf("snapshot %s: %w", sn.ID, err)
		}
		return nil
	})
	if err != nil {
		return chunk.SweepStats{}, fmt.Errorf("gc: reachable chunks: %w", err)
	}
	// Image bases, harness bundles: whatever else names chunks.
	for _, r := range c.roots {
		if err := r.MarkLive(ctx, live); err != nil {
			return chunk.SweepStats{}, fmt.Errorf("gc: reachable chunks: %w", err)
		}
	}
	return chunk.Sweep(ctx, bs, cfg.KeyPrefix, func(h string) bool { return live[h] }, c.now().Add(-cfg.Grace))
}
