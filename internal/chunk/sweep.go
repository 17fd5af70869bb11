package chunk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/blob"
)

// SweepStats describes one Sweep.
type SweepStats struct {
	Scanned      int64 // chunk objects listed
	Reachable    int64 // kept: reachable from a committed or in-flight manifest
	Young        int64 // kept: unreachable but modified at or after olderThan
	Deleted      int64
	DeletedBytes int64
	Foreign      int64 // keys under prefix that are not chunk objects (left alone)
}

// Sweep deletes the chunk objects under prefix (a Config.KeyPrefix; empty
// means DefaultKeyPrefix) that
// reachable reports false for AND whose ModTime is before olderThan. The grace
// period protects uploads whose manifest is not yet committed: pass an
// olderThan well before the oldest in-flight snapshot began, and at least
// Config.RefreshAfter before now (see there). Each candidate is re-stat'ed just
// before deletion, so an object re-put (refreshed) since the listing is kept.
// reachable is called sequentially, from the goroutine running the listing.
func Sweep(ctx context.Context, store blob.Store, prefix string,
	reachable func(hash string) bool, olderThan time.Time) (SweepStats, error) {
	if trimSlashes(prefix) == "" {
		prefix = DefaultKeyPrefix
	}
	var st SweepStats
	var doomed []string
	err := store.List(ctx, prefixDir(prefix), func(info blob.Info) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, ok := hashFromKey(prefix, info.Key)
		switch {
		case !ok:
			st.Foreign++
			return nil
		case reachable(h):
			st.Reachable++
		case !info.ModTime.Before(olderThan):
			st.Young++
		default:
			doomed = append(doomed, info.Key)
		}
		st.Scanned++
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("sweep chunks under %s: list: %w", prefix, err)
	}
	for _, key := range doomed {
		info, err := store.Stat(ctx, key)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			continue
		case err != nil:
			return st, fmt.Errorf("sweep chunks under %s: stat %s: %w", prefix, key, err)
		case !info.ModTime.Before(olderThan):
			st.Young++
			continue
		}
		if err := store.Delete(ctx, key); err != nil {
			return st, fmt.Errorf("sweep chunks under %s: delete %s: %w", prefix, key, err)
		}
		st.Deleted++
		st.DeletedBytes += info.Size
	}
	return st, nil
}

// prefixDir is the listing prefix of chunk keys under prefix.
func prefixDir(prefix string) string { return trimSlashes(prefix) + "/" }

// MarkLive adds every object m names to live: a delta chunk needs its
// base and its delta.
func MarkLive(live map[string]bool, m Manifest) {
	for _, r := range m.Chunks {
		for _, o := range r.Objects() {
			live[o] = true
		}
	}
}

// MarkLiveRoles decodes a role -> Manifest map (a snapshot's manifests) and
// marks every object of each as MarkLive does.
func MarkLiveRoles(live map[string]bool, roles []byte) error {
	var ms map[string]Manifest
	if err := json.Unmarshal(roles, &ms); err != nil {
		return fmt.Errorf("decode manifests: %w", err)
	}
	for _, m := range ms {
		MarkLive(live, m)
	}
	return nil
}
