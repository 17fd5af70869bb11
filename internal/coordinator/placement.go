package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/store"
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
// scheduler.ErrNoCapacity and says why each host was passed over). It
// evicts nothing: sessions queue for room (opRun.placeOrQueue).
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
	cands, _, err := c.fleet(ctx, need, 0)
	if err != nil {
		return "", err
	}
	return scheduler.Place(cands, requestOf(spec))
}

// fleet reads the hosts and the sessions placed on them: the candidates
// for need, and those sessions as eviction sees them. floor is the
// eviction floor of hosts that report none.
func (c *Placement) fleet(ctx context.Context, need scheduler.Need, floor time.Duration) ([]scheduler.Candidate, []scheduler.Resident, error) {
	rows, err := c.st.ListHosts(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("place: list hosts: %w", err)
	}
	sessions, err := c.st.ListSessions(ctx, domain.SessionFilter{States: domain.VMStates()})
	if err != nil {
		return nil, nil, fmt.Errorf("place: list sessions: %w", err)
	}
	hosts := make([]scheduler.Host, 0, len(rows))
	for _, h := range rows {
		hosts = append(hosts, scheduler.Host{ID: h.ID, Connected: h.State == domain.HostReady && h.Enabled(),
			LastHeartbeat: h.LastHeartbeat, Facts: h.Facts, Capacity: h.Capacity, EvictIdleAfter: hostFloor(h.Capacity, floor)})
	}
	placed := make([]scheduler.Placed, 0, len(sessions))
	residents := make([]scheduler.Resident, 0, len(sessions))
	for _, s := range sessions {
		placed = append(placed, scheduler.Placed{HostID: s.HostID, MemoryMiB: s.Spec.MemoryMiB, VCPUs: s.Spec.VCPUs})
		residents = append(residents, residentOf(s))
	}
	// A host that missed a few heartbeats is probably gone, even before the
	// monitor may declare it lost.
	need.Now, need.FreshWithin = c.now(), 3*c.heartbeat+time.Second
	return scheduler.Candidates(hosts, placed, need), residents, nil
}

func requestOf(spec domain.SessionSpec) scheduler.Request {
	return scheduler.Request{MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs}
}

// hostFloor is the eviction floor of a host with capacity c: its own, or
// def when it reports none; negative when it evicts none.
func hostFloor(c domain.Capacity, def time.Duration) time.Duration {
	switch {
	case c.EvictIdleAfterSec < 0:
		return -1
	case c.EvictIdleAfterSec > 0:
		return time.Duration(c.EvictIdleAfterSec) * time.Second
	}
	return def
}

// residentOf is session s as eviction sees it: only an Active session that
// may idle can be evicted; one being suspended or deleted frees its room.
func residentOf(s domain.Session) scheduler.Resident {
	last := s.LastActivity
	if s.UpdatedAt.After(last) {
		last = s.UpdatedAt // it just became active
	}
	return scheduler.Resident{ID: s.ID, HostID: s.HostID, MemoryMiB: s.Spec.MemoryMiB, VCPUs: s.Spec.VCPUs, LastActive: last,
		Freeing: s.State == domain.SessionSuspending || s.State == domain.SessionDeleting,
		Kept:    s.State != domain.SessionActive || s.Spec.IdleTimeoutSec < 0}
}

// errQueued means no host has room yet: the op waits in the queue without
// holding a worker (runOp defers it) and looks again.
var errQueued = errors.New("queued for room")

// queueRecheck is how often an op waiting for room looks again.
const queueRecheck = time.Second

// defaultRetryAfter is the Retry-After of a refusal for room when no
// session will become evictable by itself.
const defaultRetryAfter = 30 * time.Second

// Op steps of an op waiting for room, and of one refused for it.
const (
	stepQueued = "queued"
	stepNoRoom = "no_room"
)

// placeOrQueue picks a host for the session that meets need. When every
// host is full it makes room (evicting idle sessions) and returns
// errQueued until the op's deadline: QueueWait when some host could take
// the session once room is made (or refused it for capacity in this
// claim), else PlacementWait. Past it, it returns a
// *domain.RoomError in the first case, the refusal (scheduler.ErrNoCapacity)
// in the second.
func (x *opRun) placeOrQueue(ctx context.Context, spec domain.SessionSpec, need scheduler.Need) (domain.HostID, error) {
	cands, residents, err := x.c.places.fleet(ctx, need, x.c.cfg.EvictIdleAfter)
	if err != nil {
		return "", transient(err)
	}
	hostID, refusal := scheduler.Place(cands, requestOf(spec))
	if !errors.Is(refusal, scheduler.ErrNoCapacity) {
		return hostID, refusal
	}
	room := scheduler.MakeRoom(cands, residents, requestOf(spec), x.c.now())
	// Hosts that refused it for capacity in this claim are passed over now
	// but count again at the next: they could take it.
	room.Possible = room.Possible || len(need.Exclude) > 0
	wait := x.c.cfg.PlacementWait
	if room.Possible {
		wait = x.c.cfg.QueueWait
	}
	if x.c.now().Before(x.op.CreatedAt.Add(wait)) {
		if room.Possible {
			if err := x.makeRoom(ctx, cands, residents, requestOf(spec)); err != nil {
				return "", err
			}
		}
		return "", x.queue(ctx, refusal, room.Possible)
	}
	if !room.Possible {
		return "", refusal
	}
	if err := x.step(ctx, stepNoRoom); err != nil {
		return "", err
	}
	x.c.met.PlacementRefused(string(x.op.Kind))
	retry := room.RetryAfter
	if retry <= 0 {
		retry = defaultRetryAfter
	}
	why := strings.TrimPrefix(refusal.Error(), scheduler.ErrNoCapacity.Error()+": ")
	return "", &domain.RoomError{Why: fmt.Sprintf("%s (waited %s in the queue)", why, wait), RetryAfter: retry}
}

// queue records that the op waits (once) and returns errQueued; forRoom:
// it waits for room on a full host, not for a host able to run it.
func (x *opRun) queue(ctx context.Context, refusal error, forRoom bool) error {
	if x.op.Step != stepQueued {
		if err := x.step(ctx, stepQueued); err != nil {
			return err
		}
		if forRoom {
			x.c.met.PlacementQueued(string(x.op.Kind))
		}
		msg := "no host has room: waiting in the queue"
		if !forRoom {
			msg = "no host can run it yet: waiting for one"
		}
		x.log.Info(msg, "why", refusal.Error())
		x.appendEvent(ctx, "queued", map[string]any{"why": refusal.Error(), "for_room": forRoom})
	}
	return fmt.Errorf("%w: %w", errQueued, refusal)
}

// makeRoom asks the scheduler how to make room for req and enqueues the
// suspends it picks. A pick found to have an op in flight meanwhile is
// planned around (its op frees its room if it ends the machine).
func (x *opRun) makeRoom(ctx context.Context, cands []scheduler.Candidate, residents []scheduler.Resident, req scheduler.Request) error {
	for range 4 {
		room := scheduler.MakeRoom(cands, residents, req, x.c.now())
		busy, frees, err := x.evictFor(ctx, room, residents)
		if err != nil || busy == "" {
			return err
		}
		for i := range residents {
			if residents[i].ID == busy {
				residents[i].Kept, residents[i].Freeing = !frees, frees
			}
		}
	}
	return nil
}

// evictFor enqueues an evict op (a normal suspend) for each session room
// names. It returns the first that had another op in flight, and whether
// that op frees its room.
func (x *opRun) evictFor(ctx context.Context, room scheduler.Room, residents []scheduler.Resident) (domain.SessionID, bool, error) {
	for _, id := range room.Evict {
		var victim scheduler.Resident
		for _, r := range residents {
			if r.ID == id {
				victim = r
			}
		}
		// One eviction per waiting session and period of activity of the
		// victim: a later pass finds the op it enqueued.
		key := fmt.Sprintf("room:%s:%d", x.s.ID, victim.LastActive.UnixMicro())
		opID := x.c.newID()
		op, err := x.c.st.EnqueueOp(ctx, domain.Op{ID: opID, SessionID: id, Kind: domain.OpEvict,
			IdempotencyKey: key, CreatedAt: x.c.now()}, false)
		switch {
		case errors.Is(err, store.ErrOpInProgress):
			return id, x.frees(ctx, id), nil
		case err != nil:
			return "", false, transient(fmt.Errorf("enqueue eviction of session %s: %w", id, err))
		case op.ID != opID:
			continue // enqueued by an earlier pass
		}
		idle := x.c.now().Sub(victim.LastActive).Round(time.Second)
		x.log.Info("evicting an idle session to make room", "evicted_session_id", id, "host_id", room.Host, "idle_for", idle)
		x.c.met.SessionEvicted()
		x.appendEventTo(ctx, id, "evicted", map[string]any{"for_session_id": x.s.ID, "host_id": room.Host, "idle_s": int64(idle.Seconds())})
		x.appendEvent(ctx, "evicting", map[string]any{"session_id": id, "host_id": room.Host})
		x.c.wake(ctx, TopicOps)
	}
	return "", false, nil
}

// frees reports whether the op in flight for session id ends its machine
// (a suspend, a delete, an expiry), so its room comes back.
func (x *opRun) frees(ctx context.Context, id domain.SessionID) bool {
	ops, err := x.c.st.ListOps(ctx, id)
	if err != nil {
		return false
	}
	for _, o := range ops {
		if o.State == domain.OpPending || o.State == domain.OpRunning {
			return o.Kind == domain.OpEvict || o.Kind == domain.OpDestroy || o.Kind == domain.OpExpire
		}
	}
	return false
}
