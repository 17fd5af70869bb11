package api

import (
	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// The public wire types in apiv1 import nothing internal, so they repeat the
// few host-link and guest types the API shows: apiv1.HostFacts,
// BackendFacts and Capacity have the JSON of domain.HostFacts, BackendFacts
// and Capacity; apiv1.ExecStart, ExecControl, FileInfo and the Chan* bytes
// are guestapi's. Exec WebSocket messages and file listings are relayed
// from the guest as bytes; host facts and capacity (of host rows and of
// image bases) are converted here. wire_test.go checks the shapes stay
// identical.

// hostFactsOut shows a host's facts (nil: none).
func hostFactsOut(f *domain.HostFacts) *apiv1.HostFacts {
	if f == nil {
		return nil
	}
	out := &apiv1.HostFacts{
		Hostname: f.Hostname, Arch: f.Arch, CPUModel: f.CPUModel, CPUFlags: f.CPUFlags, Kernel: f.Kernel,
		AgentVersion: f.AgentVersion, Backend: backendFactsOut(f.Backend),
	}
	for _, b := range f.Available {
		out.Available = append(out.Available, backendFactsOut(b))
	}
	return out
}

func backendFactsOut(b domain.BackendFacts) apiv1.BackendFacts {
	return apiv1.BackendFacts{
		Name: b.Name, Version: b.Version, Acceleration: b.Acceleration, Isolation: b.Isolation,
		RootFS: b.RootFS, Harness: b.Harness, Usable: b.Usable, Reason: b.Reason,
	}
}

func capacityOut(c domain.Capacity) apiv1.Capacity {
	return apiv1.Capacity{MemoryMiB: c.MemoryMiB, VCPUs: c.VCPUs, MaxSessions: c.MaxSessions, UsedMemoryMiB: c.UsedMemoryMiB,
		UsedVCPUs: c.UsedVCPUs, Sessions: c.Sessions, CachedSnapshots: c.CachedSnapshots, EvictIdleAfterSec: c.EvictIdleAfterSec}
}
