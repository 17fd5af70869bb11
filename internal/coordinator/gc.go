package coordinator

import (
	"context"
	"encoding/json"
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
		return markLive(live, sn.Manifests, "snapshot "+sn.ID)
	})
	if err != nil {
		return chunk.SweepStats{}, fmt.Errorf("gc: reachable chunks: %w", err)
	}
	// Base snapshots of images that are not disabled (a disabled image's
	// base stays reachable through the snapshots of sessions started from it).
	imgs, err := c.st.ListImages(ctx)
	if err != nil {
		return chunk.SweepStats{}, fmt.Errorf("gc: list images: %w", err)
	}
	for _, img := range imgs {
		if img.State == domain.ImageDisabled || len(img.Manifests) == 0 {
			continue
		}
		if err := markLive(live, img.Manifests, "image "+img.ID); err != nil {
			return chunk.SweepStats{}, fmt.Errorf("gc: reachable chunks: %w", err)
		}
	}
	// Every registered harness bundle (rows are never deleted).
	if err := c.markHarnessesLive(ctx, live); err != nil {
		return chunk.SweepStats{}, fmt.Errorf("gc: %w", err)
	}
	return chunk.Sweep(ctx, bs, cfg.KeyPrefix, func(h string) bool { return live[h] }, c.now().Add(-cfg.Grace))
}

// markLive adds every object the role -> manifest map names to live.
func markLive(live map[string]bool, manifests []byte, what string) error {
	var ms map[string]chunk.Manifest
	if err := json.Unmarshal(manifests, &ms); err != nil {
		return fmt.Errorf("manifests of %s: %w", what, err)
	}
	for _, m := range ms {
		for _, r := range m.Chunks {
			for _, o := range r.Objects() { // a delta needs its base and its delta
				live[o] = true
			}
		}
	}
	return nil
}
