package machines_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// TestFenceAcrossRestart: the highest epoch seen survives a new registry
// on the same data dir, and a lower one is refused as stale.
func TestFenceAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := machines.New(machines.Config{DataDir: dir}, machines.Deps{})
	if err := first.Fence("s1", 3); err != nil {
		t.Fatal(err)
	}
	second := machines.New(machines.Config{DataDir: dir}, machines.Deps{})
	if e, err := second.HighestEpoch("s1"); err != nil || e != 3 {
		t.Fatalf("highest epoch after a restart: %d, %v; want 3", e, err)
	}
	var stale *machines.StaleEpochError
	if err := second.Fence("s1", 2); !errors.As(err, &stale) || stale.High != 3 {
		t.Fatalf("fence at 2 after 3: %v, want a stale epoch error", err)
	}
	if err := second.Fence("s1", 3); err != nil {
		t.Fatalf("fence at the same epoch: %v", err)
	}
}

// TestReserve: reservations count against the capacity, the vCPU
// overcommit and the session limit, and are released.
func TestReserve(t *testing.T) {
	t.Parallel()
	capacity := domain.Capacity{MemoryMiB: 1024, VCPUs: 1, MaxSessions: 2}
	tests := []struct {
		name    string
		held    []hostlink.MachineSpec
		spec    hostlink.MachineSpec
		wantErr string
	}{
		{"fits", nil, hostlink.MachineSpec{MemoryMiB: 1024, VCPUs: 1}, ""},
		{"memory", []hostlink.MachineSpec{{MemoryMiB: 768, VCPUs: 1}}, hostlink.MachineSpec{MemoryMiB: 512, VCPUs: 1}, "needs 512 MiB"},
		{"vcpus", nil, hostlink.MachineSpec{MemoryMiB: 1, VCPUs: domain.VCPUOvercommit + 1}, "vCPUs"},
		{"sessions", []hostlink.MachineSpec{{MemoryMiB: 1, VCPUs: 1}, {MemoryMiB: 1, VCPUs: 1}}, hostlink.MachineSpec{MemoryMiB: 1, VCPUs: 1}, "at most 2 sessions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := machines.New(machines.Config{DataDir: t.TempDir(), Capacity: capacity}, machines.Deps{Now: time.Now})
			for i, s := range tt.held {
				if err := r.Reserve(string(rune('a'+i)), s); err != nil {
					t.Fatal(err)
				}
			}
			err := r.Reserve("new", tt.spec)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("reserve: %v, want %q", err, tt.wantErr)
			}
			if len(tt.held) > 0 {
				for i := range tt.held {
					r.Unreserve(string(rune('a' + i)))
				}
				if err := r.Reserve("new", tt.spec); err != nil {
					t.Fatalf("reserve once the others are released: %v", err)
				}
			}
		})
	}
}
