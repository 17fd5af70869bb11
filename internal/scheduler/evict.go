package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Resident is a session holding room on a host, as eviction sees it.
type Resident struct {
	ID        domain.SessionID
	HostID    domain.HostID
	MemoryMiB int
	VCPUs     int
	// LastActive is when it was last used, or became active if later: the
	// clock of least recently used.
	LastActive time.Time
	// Freeing: a suspend of it is under way, so its room comes back
	// without another eviction.
	Freeing bool
	// Kept: it is never evicted (its spec says it never idles, or it is not
	// Active, or another op of it is in flight).
	Kept bool
}

// Room is how a request Place refused can get room on a host.
type Room struct {
	// Possible: some ready, compatible host could take the request once
	// room is made on it. Without one, waiting does not help (the request
	// is larger than every host, or no host can run it).
	Possible bool
	// Host is where room is being made: Evict names the sessions to
	// suspend there, least recently used first; Freeing means suspends
	// already under way make the room, so nothing more is evicted.
	Host    domain.HostID
	Evict   []domain.SessionID
	Freeing bool
	// RetryAfter, when no room can be made now, is how soon a session may
	// have been idle long enough to be evicted (0: none will by itself).
	RetryAfter time.Duration
}

// MakeRoom decides how to make room for req when Place found none.
// Eviction suspends Active sessions (their files and processes resume
// later) on a ready, compatible host, and only those idle at least the
// host's floor (Candidate.EvictIdleAfter; negative: the host evicts none)
// and not Kept. If suspends under way already make room on some host it
// evicts nothing more. Otherwise it picks the host needing the fewest
// evictions, then the one whose first victim is the least recently used,
// then the smaller id; on that host it evicts the least recently used
// sessions until req fits.
func MakeRoom(cands []Candidate, residents []Resident, req Request, now time.Time) Room {
	byHost := make(map[domain.HostID][]Resident, len(cands))
	for _, r := range residents {
		byHost[r.HostID] = append(byHost[r.HostID], r)
	}
	var room Room
	var best *hostRoom
	for _, c := range cands {
		if !c.Ready || c.Tried || c.Incompatible != "" || rejects(emptied(c), req) != "" {
			continue
		}
		room.Possible = true
		h := roomOn(c, byHost[c.HostID], req, now)
		switch {
		case h.freeing:
			if best == nil || !best.freeing || c.HostID < best.host {
				best = &h
			}
		case h.victims != nil && (best == nil || !best.freeing && h.better(*best)):
			best = &h
		case h.victims == nil && h.soonest > 0 && (room.RetryAfter == 0 || h.soonest < room.RetryAfter):
			room.RetryAfter = h.soonest
		}
	}
	if best == nil {
		return room
	}
	room.Host, room.Freeing, room.RetryAfter = best.host, best.freeing, 0
	for _, v := range best.victims {
		room.Evict = append(room.Evict, v.ID)
	}
	return room
}

// hostRoom is how room can be made on one host.
type hostRoom struct {
	host    domain.HostID
	freeing bool       // suspends under way make room
	victims []Resident // else these evictions do (nil: none can)
	soonest time.Duration
}

// better reports whether h frees room with fewer evictions than o, or as
// few but an older first victim, or on the smaller host id.
func (h hostRoom) better(o hostRoom) bool {
	if len(h.victims) != len(o.victims) {
		return len(h.victims) < len(o.victims)
	}
	if a, b := h.victims[0].LastActive, o.victims[0].LastActive; !a.Equal(b) {
		return a.Before(b)
	}
	return h.host < o.host
}

// roomOn works out how room can be made for req on host c, whose
// sessions are rs.
func roomOn(c Candidate, rs []Resident, req Request, now time.Time) hostRoom {
	h := hostRoom{host: c.HostID}
	var evictable []Resident
	for _, r := range rs {
		switch {
		case r.Freeing:
			c = without(c, r)
		case r.Kept || c.EvictIdleAfter < 0:
		case now.Sub(r.LastActive) >= c.EvictIdleAfter:
			evictable = append(evictable, r)
		default:
			if wait := r.LastActive.Add(c.EvictIdleAfter).Sub(now); h.soonest == 0 || wait < h.soonest {
				h.soonest = wait
			}
		}
	}
	if rejects(c, req) == "" {
		h.freeing = true
		return h
	}
	slices.SortFunc(evictable, func(a, b Resident) int {
		return cmp.Or(a.LastActive.Compare(b.LastActive), cmp.Compare(a.ID, b.ID))
	})
	for i, r := range evictable {
		if c = without(c, r); rejects(c, req) == "" {
			h.victims = evictable[:i+1]
			return h
		}
	}
	return h
}

// without is c once r's room is free.
func without(c Candidate, r Resident) Candidate {
	c.PlacedMemoryMiB -= r.MemoryMiB
	c.PlacedVCPUs -= r.VCPUs
	c.PlacedSessions--
	return c
}

// emptied is c with nothing placed on it.
func emptied(c Candidate) Candidate {
	c.PlacedMemoryMiB, c.PlacedVCPUs, c.PlacedSessions = 0, 0, 0
	return c
}
