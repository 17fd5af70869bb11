package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

func TestPlace(t *testing.T) {
	t.Parallel()
	ready := func(id domain.HostID, mem, placedMem, sessions int) Candidate {
		return Candidate{HostID: id, Ready: true, MemoryMiB: mem, VCPUs: 2, PlacedMemoryMiB: placedMem, PlacedSessions: sessions}
	}
	tests := []struct {
		name    string
		cands   []Candidate
		req     Request
		want    domain.HostID
		wantErr string
	}{
		{name: "no hosts", req: Request{MemoryMiB: 256}, wantErr: "no hosts are registered"},
		{name: "most free memory wins", cands: []Candidate{ready("a", 1024, 512, 1), ready("b", 1024, 0, 0)}, req: Request{MemoryMiB: 256, VCPUs: 1}, want: "b"},
		{name: "tie breaks on sessions", cands: []Candidate{ready("a", 1024, 0, 3), ready("b", 1024, 0, 1)}, req: Request{MemoryMiB: 256}, want: "b"},
		{name: "tie breaks on id", cands: []Candidate{ready("b", 1024, 0, 0), ready("a", 1024, 0, 0)}, req: Request{MemoryMiB: 256}, want: "a"},
		{name: "not ready skipped", cands: []Candidate{{HostID: "a", MemoryMiB: 4096}, ready("b", 512, 0, 0)}, req: Request{MemoryMiB: 256}, want: "b"},
		{name: "memory does not fit", cands: []Candidate{ready("a", 512, 384, 1)}, req: Request{MemoryMiB: 256}, wantErr: "a: 128 MiB free, 256 MiB asked"},
		{name: "session limit", cands: []Candidate{{HostID: "a", Ready: true, MemoryMiB: 4096, MaxSessions: 2, PlacedSessions: 2}}, req: Request{MemoryMiB: 1}, wantErr: "at its limit of 2"},
		{name: "vcpu overcommit limit", cands: []Candidate{{HostID: "a", Ready: true, MemoryMiB: 4096, VCPUs: 1, PlacedVCPUs: 4}}, req: Request{MemoryMiB: 1, VCPUs: 1}, wantErr: "4 vCPUs placed on 1"},
		{name: "tried skipped", cands: []Candidate{func() Candidate { c := ready("a", 4096, 0, 0); c.Tried = true; return c }()},
			req: Request{MemoryMiB: 256}, wantErr: "a: tried already (it refused)"},
		{name: "exact fit", cands: []Candidate{ready("a", 512, 256, 1)}, req: Request{MemoryMiB: 256}, want: "a"},
		{name: "cached wins over free memory", cands: []Candidate{ready("a", 4096, 0, 0), func() Candidate { c := ready("b", 1024, 512, 1); c.Cached = true; return c }()},
			req: Request{MemoryMiB: 256}, want: "b"},
		{name: "incompatible skipped", cands: []Candidate{func() Candidate { c := ready("a", 4096, 0, 0); c.Incompatible = "backend qemu"; return c }(), ready("b", 1024, 0, 0)},
			req: Request{MemoryMiB: 256}, want: "b"},
		{name: "only incompatible", cands: []Candidate{func() Candidate { c := ready("a", 4096, 0, 0); c.Incompatible = "backend qemu"; return c }()},
			req: Request{MemoryMiB: 256}, wantErr: "incompatible: backend qemu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Place(tt.cands, tt.req)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Place() err = %v, want ErrNoCapacity containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Place() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestCompatible(t *testing.T) {
	t.Parallel()
	base := domain.HostFacts{Arch: "amd64", CPUModel: "EPYC", Backend: domain.BackendFacts{Name: "qemu", Version: "7.2", Acceleration: "tcg"}}
	with := func(f func(*domain.HostFacts)) domain.HostFacts { c := base; f(&c); return c }
	tests := []struct {
		name string
		h    domain.HostFacts
		snap domain.HostFacts
		want string
	}{
		{"same", base, base, ""},
		{"other CPU under tcg is fine", with(func(f *domain.HostFacts) { f.CPUModel = "Xeon" }), base, ""},
		{"other CPU under kvm", with(func(f *domain.HostFacts) { f.CPUModel = "Xeon"; f.Backend.Acceleration = "kvm" }),
			with(func(f *domain.HostFacts) { f.Backend.Acceleration = "kvm" }), "CPU"},
		{"other backend", with(func(f *domain.HostFacts) { f.Backend.Name = "firecracker" }), base, "backend firecracker"},
		{"other version", with(func(f *domain.HostFacts) { f.Backend.Version = "8.0" }), base, "snapshot needs \"7.2\""},
		{"other accel", with(func(f *domain.HostFacts) { f.Backend.Acceleration = "kvm" }), base, "acceleration kvm"},
		{"other arch", with(func(f *domain.HostFacts) { f.Arch = "arm64" }), base, "architecture arm64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Compatible(tt.snap, tt.h)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("Compatible = %q, want containing %q", got, tt.want)
			}
		})
	}
}
