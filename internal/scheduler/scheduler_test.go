package scheduler

import (
	"errors"
	"strings"
	"testing"
)

func TestPlace(t *testing.T) {
	t.Parallel()
	ready := func(id string, mem, placedMem, sessions int) Candidate {
		return Candidate{HostID: id, Ready: true, MemoryMiB: mem, VCPUs: 2, PlacedMemoryMiB: placedMem, PlacedSessions: sessions}
	}
	tests := []struct {
		name    string
		cands   []Candidate
		req     Request
		want    string
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
		{name: "exact fit", cands: []Candidate{ready("a", 512, 256, 1)}, req: Request{MemoryMiB: 256}, want: "a"},
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
