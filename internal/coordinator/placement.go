package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/scheduler"
)

// Placement picks hosts for machines from the fleet as the store records
// it: the coordinator places sessions with it, image jobs their captures.
type Placement struct {
	st        Store
	now       func() time.Time
	heartbeat time.Duration
}

// NewPlacement returns a Placement over st; heartbeat is the interval hosts
// are told to heartbeat at (0: the coordinator's default), now the clock
// (nil: time.Now).
func NewPlacement(st Store, heartbeat time.Duration, now func() time.Time) *Placement {
	if heartbeat <= 0 {
		heartbeat = defaultHeartbeat
	}
	if now == nil {
		now = time.Now
	}
	return &Placement{st: st, now: now, heartbeat: heartbeat}
}

// PlaceWithin picks a host for a machine of spec's size that meets need,
// retrying until one fits or wait runs out (the last refusal wraps
// scheduler.ErrNoCapacity and says why each host was passed over).
func (c *Placement) PlaceWithin(ctx context.Context, spec domain.SessionSpec, need scheduler.Need, wait time.Duration) (domain.HostID, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		id, err := c.place(ctx, spec, need)
		if err == nil || !errors.Is(err, scheduler.ErrNoCapacity) {
			return id, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// place is one placement pass over the hosts and what is placed on them.
func (c *Placement) place(ctx context.Context, spec domain.SessionSpec, need scheduler.Need) (domain.HostID, error) {
	rows, err := c.st.ListHosts(ctx)
	if err != nil {
		return "", fmt.Errorf("place: list hosts: %w", err)
	}
	sessions, err := c.st.ListSessions(ctx, domain.SessionFilter{States: domain.VMStates()})
	if err != nil {
		return "", fmt.Errorf("place: list sessions: %w", err)
	}
	hosts := make([]scheduler.Host, 0, len(rows))
	for _, h := range rows {
		hosts = append(hosts, scheduler.Host{ID: h.ID, Connected: h.State == domain.HostReady && h.Enabled(),
			LastHeartbeat: h.LastHeartbeat, Facts: h.Facts, Capacity: h.Capacity})
	}
	placed := make([]scheduler.Placed, 0, len(sessions))
	for _, s := range sessions {
		placed = append(placed, scheduler.Placed{HostID: s.HostID, MemoryMiB: s.Spec.MemoryMiB, VCPUs: s.Spec.VCPUs})
	}
	// A host that missed a few heartbeats is probably gone, even before the
	// monitor may declare it lost.
	need.Now, need.FreshWithin = c.now(), 3*c.heartbeat+time.Second
	cands := scheduler.Candidates(hosts, placed, need)
	return scheduler.Place(cands, scheduler.Request{MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs})
}
