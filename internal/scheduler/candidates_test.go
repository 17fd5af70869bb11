package scheduler

import (
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

type candidatesCase struct {
	name   string
	hosts  []Host
	placed []Placed
	need   Need
	want   []Candidate
}

func candidatesCases() []candidatesCase {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	qemu := domain.HostFacts{Arch: "amd64", Backend: domain.BackendFacts{Name: "qemu", Version: "7.2", Acceleration: "tcg", RootFS: true, Harness: true}}
	process := domain.HostFacts{Arch: "amd64", Backend: domain.BackendFacts{Name: "process", Acceleration: "none"}}
	host := func(id domain.HostID, f domain.HostFacts, cached ...string) Host {
		return Host{ID: id, Connected: true, LastHeartbeat: now.Add(-time.Second), Facts: f,
			Capacity: domain.Capacity{MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, CachedSnapshots: cached}}
	}
	stale := host("stale", qemu)
	stale.LastHeartbeat = now.Add(-time.Minute)
	draining := host("draining", qemu)
	draining.Connected = false
	return []candidatesCase{
		{
			name:   "load is summed per host, sessions on unknown hosts ignored",
			hosts:  []Host{host("a", qemu), host("b", qemu)},
			placed: []Placed{{"a", 256, 1}, {"a", 512, 2}, {"gone", 1024, 1}},
			need:   Need{Now: now, FreshWithin: 10 * time.Second},
			want: []Candidate{
				{HostID: "a", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, PlacedMemoryMiB: 768, PlacedVCPUs: 3, PlacedSessions: 2},
				{HostID: "b", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8},
			},
		},
		{
			name:  "stale and draining hosts are not ready, excluded ones tried",
			hosts: []Host{stale, draining, host("tried", qemu)},
			need:  Need{Now: now, FreshWithin: 10 * time.Second, Exclude: []domain.HostID{"tried"}},
			want: []Candidate{
				{HostID: "stale", MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8},
				{HostID: "draining", MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8},
				{HostID: "tried", Ready: true, Tried: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8},
			},
		},
		{
			name:  "a snapshot needs compatible facts and prefers hosts caching it",
			hosts: []Host{host("a", qemu, "snap-1"), host("b", process)},
			need:  Need{Snapshot: &SnapshotNeed{ID: "snap-1", Facts: qemu}},
			want: []Candidate{
				{HostID: "a", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, Cached: true},
				{HostID: "b", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, Incompatible: `backend process, snapshot needs qemu`},
			},
		},
		{
			name:  "root filesystems and harnesses need a backend that attaches them",
			hosts: []Host{host("a", qemu), host("b", process)},
			need:  Need{RootFS: true, Harness: true},
			want: []Candidate{
				{HostID: "a", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8},
				{HostID: "b", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, Incompatible: "backend process cannot boot an image's root filesystem"},
			},
		},
		{
			name:  "harness only",
			hosts: []Host{host("b", process)},
			need:  Need{Harness: true},
			want: []Candidate{
				{HostID: "b", Ready: true, MemoryMiB: 4096, VCPUs: 2, MaxSessions: 8, Incompatible: "backend process cannot attach a harness bundle"},
			},
		},
	}
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	for _, tt := range candidatesCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Candidates(tt.hosts, tt.placed, tt.need)
			if len(got) != len(tt.want) {
				t.Fatalf("Candidates = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("candidate %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
