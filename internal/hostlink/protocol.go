package hostlink

import "time"

// Version is the host link protocol version. Hosts and coordinators refuse a
// mismatch with a clear error. Bump it on any incompatible change.
//
// Changelog:
//   - 1 (2026-11-30): connect, register, heartbeat; machine start, destroy,
//     list; guest proxy.
const Version = 1

// Headers.
const (
	HeaderVersion = "Engrams-Hostlink-Version" // on the connect request and its answer
	HeaderEpoch   = "Engrams-Epoch"            // fencing epoch on every session command
	HeaderHostID  = "Engrams-Host-Id"          // answer to connect: who the coordinator thinks we are
)

// PathConnect is where a host dials the coordinator (WebSocket upgrade,
// Authorization: Bearer <host token>).
const PathConnect = "/hostlink/v1/connect"

// Routes the coordinator serves to a host over streams the host opens.
const (
	PathRegister  = "/v1/register"  // POST RegisterRequest -> RegisterResponse
	PathHeartbeat = "/v1/heartbeat" // POST HeartbeatRequest -> HeartbeatResponse
)

// Routes a host serves to the coordinator over streams the coordinator opens.
// {id} is a session id. Every request names the session's epoch in
// HeaderEpoch; a host refuses an epoch lower than the highest it has seen
// for that session with 409 and ErrorBody.Code "stale_epoch".
const (
	PathMachines = "/v1/machines"             // GET -> []MachineStatus
	PathMachine  = "/v1/machines/{id}"        // PUT StartRequest -> MachineStatus (idempotent); DELETE -> 204
	PathGuest    = "/v1/machines/{id}/guest/" // prefix: the rest is proxied to the guest daemon
)

// Facts describe a host; several are part of a snapshot's identity.
type Facts struct {
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
}

// MachineStatus is one machine a host runs.
type MachineStatus struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
	State     string `json:"state"` // "running", "exited"
	PID       int    `json:"pid,omitempty"`
}

// Ownership is a session the coordinator says a host owns, at an epoch.
type Ownership struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
}

// RegisterRequest is the first thing a host sends on a new connection.
type RegisterRequest struct {
	Name     string          `json:"name"`
	Facts    Facts           `json:"facts"`
	Capacity Capacity        `json:"capacity"`
	Machines []MachineStatus `json:"machines"`
}

// RegisterResponse tells the host what it owns; the host destroys every
// machine not listed (or listed at a higher epoch than it runs).
type RegisterResponse struct {
	HostID            string        `json:"host_id"`
	Owned             []Ownership   `json:"owned"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
}

// HeartbeatRequest is sent every HeartbeatInterval.
type HeartbeatRequest struct {
	Capacity Capacity        `json:"capacity"`
	Machines []MachineStatus `json:"machines"`
}

// HeartbeatResponse repeats ownership so the host converges.
type HeartbeatResponse struct {
	Owned []Ownership `json:"owned"`
}

// MachineSpec is what a session's machine is started with.
type MachineSpec struct {
	MemoryMiB int               `json:"memory_mib"`
	VCPUs     int               `json:"vcpus"`
	Env       map[string]string `json:"env,omitempty"`
	Image     string            `json:"image,omitempty"`
}

// StartRequest asks a host to run a session's machine.
type StartRequest struct {
	Epoch int64       `json:"epoch"`
	Spec  MachineSpec `json:"spec"`
}

// ErrorBody is every non-2xx JSON answer on the link.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // "stale_epoch", "version_mismatch", "not_found", "capacity"
}
