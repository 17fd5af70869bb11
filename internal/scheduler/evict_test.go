package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

type roomCase struct {
	name      string
	cands     []Candidate
	residents []Resident
	req       Request
	want      Room
}

var roomNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func roomCases() []roomCase {
	now := roomNow
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	// full is a ready host with room for n 256 MiB sessions, all taken,
	// evicting sessions idle a minute.
	full := func(id domain.HostID, n int) Candidate {
		return Candidate{HostID: id, Ready: true, MemoryMiB: 256 * n, VCPUs: n, MaxSessions: n,
			PlacedMemoryMiB: 256 * n, PlacedVCPUs: n, PlacedSessions: n, EvictIdleAfter: time.Minute}
	}
	res := func(id domain.SessionID, host domain.HostID, idle time.Duration) Resident {
		return Resident{ID: id, HostID: host, MemoryMiB: 256, VCPUs: 1, LastActive: ago(idle)}
	}
	with := func(c Candidate, f func(*Candidate)) Candidate { f(&c); return c }
	kept := func(r Resident) Resident { r.Kept = true; return r }
	freeing := func(r Resident) Resident { r.Freeing = true; return r }
	small := Request{MemoryMiB: 256, VCPUs: 1}
	return []roomCase{
		{name: "no hosts: not possible", req: small, want: Room{}},
		{name: "least recently used idle-enough session is evicted",
			cands:     []Candidate{full("a", 3)},
			residents: []Resident{res("s1", "a", 5*time.Minute), res("s2", "a", 20*time.Minute), res("s3", "a", 2*time.Minute)},
			req:       small, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"s2"}}},
		{name: "a session under the floor is not evicted; retry when the first reaches it",
			cands:     []Candidate{full("a", 2)},
			residents: []Resident{res("s1", "a", 10*time.Second), res("s2", "a", 45*time.Second)},
			req:       small, want: Room{Possible: true, RetryAfter: 15 * time.Second}},
		{name: "exactly at the floor is idle enough",
			cands:     []Candidate{full("a", 1)},
			residents: []Resident{res("s1", "a", time.Minute)},
			req:       small, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"s1"}}},
		{name: "kept sessions are never evicted",
			cands:     []Candidate{full("a", 2)},
			residents: []Resident{kept(res("s1", "a", time.Hour)), kept(res("s2", "a", time.Hour))},
			req:       small, want: Room{Possible: true}},
		{name: "a host that evicts none",
			cands:     []Candidate{with(full("a", 1), func(c *Candidate) { c.EvictIdleAfter = -1 })},
			residents: []Resident{res("s1", "a", time.Hour)},
			req:       small, want: Room{Possible: true}},
		{name: "a suspend under way makes room: evict nothing more",
			cands:     []Candidate{full("a", 2)},
			residents: []Resident{freeing(res("s1", "a", time.Hour)), res("s2", "a", time.Hour)},
			req:       small, want: Room{Possible: true, Host: "a", Freeing: true}},
		{name: "a big request evicts several, oldest first",
			cands:     []Candidate{full("a", 4)},
			residents: []Resident{res("s1", "a", 3*time.Minute), res("s2", "a", 9*time.Minute), res("s3", "a", 30*time.Second), res("s4", "a", 5*time.Minute)},
			req:       Request{MemoryMiB: 512, VCPUs: 1}, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"s2", "s4"}}},
		{name: "not enough idle-enough sessions to fit: evict none",
			cands:     []Candidate{full("a", 2)},
			residents: []Resident{res("s1", "a", time.Hour), res("s2", "a", 10*time.Second)},
			req:       Request{MemoryMiB: 512}, want: Room{Possible: true, RetryAfter: 50 * time.Second}},
		{name: "the host needing fewer evictions wins over an older victim",
			cands: []Candidate{full("a", 2), with(full("b", 2), func(c *Candidate) { c.MemoryMiB = 768 })},
			residents: []Resident{res("a1", "a", time.Hour), res("a2", "a", time.Hour),
				res("b1", "b", 2*time.Minute), res("b2", "b", 3*time.Minute)},
			req: Request{MemoryMiB: 512, VCPUs: 1}, want: Room{Possible: true, Host: "b", Evict: []domain.SessionID{"b2"}}},
		{name: "across hosts the least recently used session goes",
			cands:     []Candidate{full("a", 1), full("b", 1)},
			residents: []Resident{res("a1", "a", 2*time.Minute), res("b1", "b", 7*time.Minute)},
			req:       small, want: Room{Possible: true, Host: "b", Evict: []domain.SessionID{"b1"}}},
		{name: "each host has its own floor",
			cands:     []Candidate{full("a", 1), with(full("b", 1), func(c *Candidate) { c.EvictIdleAfter = time.Hour })},
			residents: []Resident{res("a1", "a", 2*time.Minute), res("b1", "b", 7*time.Minute)},
			req:       small, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"a1"}}},
		{name: "not ready, tried, incompatible and too small hosts are not used",
			cands: []Candidate{with(full("a", 1), func(c *Candidate) { c.Ready = false }), with(full("t", 2), func(c *Candidate) { c.Tried = true }),
				with(full("b", 1), func(c *Candidate) { c.Incompatible = "backend process" }), full("c", 1)},
			residents: []Resident{res("a1", "a", time.Hour), res("t1", "t", time.Hour), res("b1", "b", time.Hour), res("c1", "c", time.Hour)},
			req:       Request{MemoryMiB: 512}, want: Room{}},
		{name: "vCPUs count too",
			cands:     []Candidate{{HostID: "a", Ready: true, MemoryMiB: 4096, VCPUs: 1, PlacedMemoryMiB: 1024, PlacedVCPUs: 4, PlacedSessions: 4, EvictIdleAfter: time.Minute}},
			residents: []Resident{res("s1", "a", time.Hour), res("s2", "a", 2*time.Hour), res("s3", "a", 0), res("s4", "a", 0)},
			req:       small, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"s2"}}},
		{name: "ties on last activity break on id",
			cands:     []Candidate{full("a", 2)},
			residents: []Resident{res("s2", "a", time.Hour), res("s1", "a", time.Hour)},
			req:       small, want: Room{Possible: true, Host: "a", Evict: []domain.SessionID{"s1"}}},
	}
}

func TestMakeRoom(t *testing.T) {
	t.Parallel()
	for _, tt := range roomCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := MakeRoom(tt.cands, tt.residents, tt.req, roomNow)
			if got.Possible != tt.want.Possible || got.Host != tt.want.Host || got.Freeing != tt.want.Freeing ||
				got.RetryAfter != tt.want.RetryAfter || !slices.Equal(got.Evict, tt.want.Evict) {
				t.Fatalf("MakeRoom = %+v, want %+v", got, tt.want)
			}
		})
	}
}
