package domain

// HostFacts describe a host; several are part of a snapshot's identity.
type HostFacts struct {
	Hostname     string         `json:"hostname"`
	Arch         string         `json:"arch"`
	CPUModel     string         `json:"cpu_model"`
	CPUFlags     []string       `json:"cpu_flags,omitempty"`
	Kernel       string         `json:"kernel"`
	AgentVersion string         `json:"agent_version"`
	Backend      BackendFacts   `json:"backend"`             // the backend in use
	Available    []BackendFacts `json:"available,omitempty"` // every backend considered
}

// BackendFacts describe one vmm backend on a host.
type BackendFacts struct {
	Name         string `json:"name"`
	Version      string `json:"version,omitempty"`
	Acceleration string `json:"acceleration"`
	Isolation    bool   `json:"isolation"`
	RootFS       bool   `json:"rootfs,omitempty"`  // can boot an image's root filesystem (capture images, run their sessions)
	Harness      bool   `json:"harness,omitempty"` // attaches harness bundles
	Usable       bool   `json:"usable"`
	Reason       string `json:"reason,omitempty"`
}

// Capacity is what a host can give sessions, and what is in use.
type Capacity struct {
	MemoryMiB     int `json:"memory_mib"`
	VCPUs         int `json:"vcpus"`
	MaxSessions   int `json:"max_sessions"`
	UsedMemoryMiB int `json:"used_memory_mib"`
	UsedVCPUs     int `json:"used_vcpus"`
	Sessions      int `json:"sessions"`
	// CachedSnapshots is filled in by the coordinator from the host's last
	// heartbeat, so placement can prefer it.
	CachedSnapshots []string `json:"cached_snapshots,omitempty"`
	// EvictIdleAfterSec is the host's eviction floor: when every host is
	// full, placement may suspend a session of this host idle at least this
	// many seconds to make room. 0: the coordinator's default; -1: never.
	EvictIdleAfterSec int `json:"evict_idle_after_s,omitempty"`
}

// VCPUOvercommit is how many session vCPUs a host offers per CPU; the
// coordinator's placement and the host's admission use the same rule.
const VCPUOvercommit = 4
