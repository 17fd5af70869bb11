package scheduler

import (
	"fmt"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Host is one registered host as the coordinator's records show it.
type Host struct {
	ID            domain.HostID
	Connected     bool // registered and accepting sessions (not draining, not lost)
	LastHeartbeat time.Time
	Facts         domain.HostFacts
	Capacity      domain.Capacity
	// EvictIdleAfter is the host's eviction floor (see Candidate).
	EvictIdleAfter time.Duration
}

// Placed is a session that may own a machine on a host, and what it uses.
type Placed struct {
	HostID    domain.HostID
	MemoryMiB int
	VCPUs     int
}

// Need is what a placement asks of a host beyond free resources.
type Need struct {
	// Snapshot, when set, is restored: only hosts compatible with the
	// facts it was taken with qualify, and those caching it are preferred.
	Snapshot *SnapshotNeed
	RootFS   bool            // the backend must boot an image's root filesystem
	Harness  bool            // the backend must attach harness bundles
	Exclude  []domain.HostID // hosts already tried for this placement
	// A host whose last heartbeat is older than FreshWithin before Now is
	// probably gone, even before the monitor may declare it lost.
	Now         time.Time
	FreshWithin time.Duration
}

// SnapshotNeed names the snapshot a placement restores.
type SnapshotNeed struct {
	ID    domain.SnapshotID
	Facts domain.HostFacts
}

// Candidates turns hosts and the sessions placed on them into placement
// candidates for need, each with its load and, when it cannot serve, why.
func Candidates(hosts []Host, placed []Placed, need Need) []Candidate {
	cands := make([]Candidate, 0, len(hosts))
	index := make(map[domain.HostID]int, len(hosts))
	for _, h := range hosts {
		index[h.ID] = len(cands)
		cands = append(cands, candidate(h, need))
	}
	for _, p := range placed {
		i, ok := index[p.HostID]
		if !ok {
			continue
		}
		cands[i].PlacedMemoryMiB += p.MemoryMiB
		cands[i].PlacedVCPUs += p.VCPUs
		cands[i].PlacedSessions++
	}
	return cands
}

func candidate(h Host, need Need) Candidate {
	fresh := need.FreshWithin <= 0 || need.Now.Sub(h.LastHeartbeat) < need.FreshWithin
	c := Candidate{
		HostID: h.ID, Ready: h.Connected && fresh, Tried: slices.Contains(need.Exclude, h.ID),
		MemoryMiB: h.Capacity.MemoryMiB, VCPUs: h.Capacity.VCPUs, MaxSessions: h.Capacity.MaxSessions,
		EvictIdleAfter: h.EvictIdleAfter,
	}
	if need.Snapshot != nil {
		c.Incompatible = Compatible(need.Snapshot.Facts, h.Facts)
		c.Cached = slices.Contains(h.Capacity.CachedSnapshots, string(need.Snapshot.ID))
	}
	switch {
	case c.Incompatible != "":
	case need.RootFS && !h.Facts.Backend.RootFS:
		c.Incompatible = fmt.Sprintf("backend %s cannot boot an image's root filesystem", h.Facts.Backend.Name)
	case need.Harness && !h.Facts.Backend.Harness:
		c.Incompatible = fmt.Sprintf("backend %s cannot attach a harness bundle", h.Facts.Backend.Name)
	}
	return c
}
