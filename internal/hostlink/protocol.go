package hostlink

import (
	"encoding/json"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Version is the host link protocol version. Hosts and coordinators refuse a
// mismatch with a clear error. Bump it on any incompatible change.
//
// Changelog:
//   - 1 (2026-11-30): connect, register, heartbeat; machine start, destroy,
//     list; guest proxy.
//   - 2 (2026-11-30): host lease (a host pauses its machines when it cannot
//     heartbeat); snapshot, restore, outbox delivery; heartbeats report
//     paused machines, activity and cached snapshots.
//   - 3 (2026-11-30): images: capture of a base snapshot, restore of a
//     base into a new session (RestoreSpec.Base), the "rootfs" manifest
//     role, prefetch of enabled images in heartbeat answers.
//   - 4 (2026-11-30): agents: harness bundles in start requests, the model
//     gateway (PathGateway) and harness event relay (PathHarnessEvents)
//     from hosts, credential grants in machine specs.
//     (2026-12-01, same version: MachineSpec no longer carries the credential
//     grants, which only the coordinator reads; hosts never read them.)
//     (2026-12-02, same version: hosts report a guest stream that hit one of
//     their bounds (PathGuestBound); a coordinator without the route answers
//     404, which a host logs and ignores.)
//     (2026-12-02, same version: one live link per host. A second
//     connection of a host is refused 409 already_connected with
//     Retry-After; a disabled or deleted host 403 host_disabled or
//     host_deleted; register and heartbeat answer these, 401 and 409
//     superseded when the link may no longer hold the host, and the
//     coordinator then closes the link. Hosts of this version end the link
//     and back off; older ones retry as after any failure.)
//     (2026-12-03, same version: hosts report their machines' egress, every
//     DNS query and connection with its verdict (PathEgress); a coordinator
//     without the route answers 404, which a host logs and ignores.)
//     (2026-12-04, same version: MachineSpec.Brokered; hosts hand TLS to
//     those hosts to the coordinator's credential broker (PathBroker).)
const Version = 4

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
	// PathGateway prefixes the model gateway: a host forwards each request
	// a guest process sends to its gateway listener (any method, path
	// /<kind>/<rest>) as PathGateway + <session id> + that path, and streams
	// the answer back. The coordinator checks the session's placeholder,
	// swaps in the real key of the credential the session's spec grants
	// for <kind> and forwards to the credential's base URL + /<rest>.
	PathGateway = "/v1/gateway/"
)

// Routes a host serves to the coordinator over streams the coordinator opens.
// {id} is a session id. Every request names the session's epoch in
// HeaderEpoch; a host refuses an epoch lower than the highest it has seen
// for that session with 409 and ErrorBody.Code "stale_epoch".
const (
	PathMachines = "/v1/machines"               // GET -> []MachineStatus
	PathMachine  = "/v1/machines/{id}"          // PUT StartRequest -> MachineStatus (idempotent); DELETE -> 204
	PathGuest    = "/v1/machines/{id}/guest/"   // prefix: the rest is proxied to the guest daemon
	PathSnapshot = "/v1/machines/{id}/snapshot" // POST SnapshotRequest -> SnapshotResponse
	PathOutbox   = "/v1/machines/{id}/outbox"   // POST OutboxDelivery -> OutboxApplied
	PathCapture  = "/v1/captures/{id}"          // POST CaptureRequest -> CaptureResponse; {id} is the image job id
)

// RoleRootFS is the manifest role of a machine's shared root filesystem
// image (an enabled OCI image). A host keeps one copy per content in its
// image cache and gives every machine its own copy-on-write layer over it;
// a snapshot of such a machine names it (its chunks are the image's).
const RoleRootFS = "rootfs"

// RoleHarness is the manifest role of the harness bundle (a read-only erofs
// image) a machine has attached; kept and named like RoleRootFS.
const RoleHarness = "harness"

// MachineStatus is one machine a host runs.
type MachineStatus struct {
	SessionID    string    `json:"session_id"`
	Epoch        int64     `json:"epoch"`
	State        string    `json:"state"` // "running", "paused" (lease expired), "exited"
	PID          int       `json:"pid,omitempty"`
	LastActivity time.Time `json:"last_activity,omitzero"` // last guest request through the host
}

// Ownership is a session the coordinator says a host owns, at an epoch.
type Ownership struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
}

// RegisterRequest is the first thing a host sends on a new connection.
type RegisterRequest struct {
	Name     string           `json:"name"`
	Facts    domain.HostFacts `json:"facts"`
	Capacity domain.Capacity  `json:"capacity"`
	Machines []MachineStatus  `json:"machines"`
	// Snapshots: as in HeartbeatRequest, so placement knows them from the
	// moment the host connects.
	Snapshots []string `json:"snapshots,omitempty"`
}

// RegisterResponse tells the host what it owns; the host destroys every
// machine not listed (or listed at a higher epoch than it runs).
type RegisterResponse struct {
	HostID            string        `json:"host_id"`
	Owned             []Ownership   `json:"owned"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	// Lease: a host that has had no successful heartbeat for this long
	// pauses every machine (it stops writing) until the coordinator confirms
	// ownership again. It is shorter than the coordinator's HostLostAfter,
	// so a cut-off host has stopped before its sessions can move.
	Lease time.Duration `json:"lease_ns"`
}

// HeartbeatRequest is sent every HeartbeatInterval.
type HeartbeatRequest struct {
	Capacity domain.Capacity `json:"capacity"`
	Machines []MachineStatus `json:"machines"`
	// Snapshots lists snapshot ids whose chunks this host holds in its cache
	// (placement prefers it for their resume); bounded, most recent first.
	Snapshots []string `json:"snapshots,omitempty"`
}

// HeartbeatResponse repeats ownership and the lease so the host converges.
type HeartbeatResponse struct {
	Owned []Ownership   `json:"owned"`
	Lease time.Duration `json:"lease_ns"`
	// Prefetch lists the base snapshots of enabled images this host could
	// run: the host fetches their chunks (and builds their root filesystem)
	// in the background, then lists them in HeartbeatRequest.Snapshots.
	Prefetch []Prefetch `json:"prefetch,omitempty"`
}

// Prefetch is one base snapshot to hold ready.
type Prefetch struct {
	ImageID    string          `json:"image_id"`
	SnapshotID string          `json:"snapshot_id"`
	Manifests  json.RawMessage `json:"manifests"` // role -> chunk manifest, RoleRootFS included
}

// MachineSpec is what a session's machine is started with: the wire form of
// the parts of a domain.SessionSpec a host acts on (credential grants stay
// with the coordinator).
type MachineSpec struct {
	MemoryMiB      int               `json:"memory_mib"`
	VCPUs          int               `json:"vcpus"`
	Env            map[string]string `json:"env,omitempty"`
	Image          string            `json:"image,omitempty"`
	ImageID        string            `json:"image_id,omitempty"`
	BaseSnapshotID string            `json:"base_snapshot_id,omitempty"`
	Harness        string            `json:"harness,omitempty"`
	HarnessID      string            `json:"harness_id,omitempty"`
	IdleTimeoutSec int               `json:"idle_timeout_s,omitempty"`
	MaxLifetimeSec int               `json:"max_lifetime_s,omitempty"`
	// Egress is what the guest may reach (domain.SessionSpec.Egress); a
	// host that can enforce it gives the machine a network path with this
	// policy, and none when it is empty.
	Egress []string `json:"egress,omitempty"`
	// Brokered are the "name:port" entries of Egress whose TLS the
	// host's proxy hands to the coordinator's credential broker
	// (PathBroker) instead of passing it through (the secrets stay with
	// the coordinator).
	Brokered []string `json:"brokered,omitempty"`
}

// MachineSpecOf maps a session spec to what its host is told.
func MachineSpecOf(s domain.SessionSpec) MachineSpec {
	return MachineSpec{
		MemoryMiB: s.MemoryMiB, VCPUs: s.VCPUs, Env: s.Env, Image: s.Image,
		ImageID: string(s.ImageID), BaseSnapshotID: string(s.BaseSnapshotID),
		Harness: s.Harness, HarnessID: s.HarnessID,
		IdleTimeoutSec: s.IdleTimeoutSec, MaxLifetimeSec: s.MaxLifetimeSec,
		Egress: s.Egress, Brokered: s.BrokeredHosts(),
	}
}

// StartRequest asks a host to run a session's machine: boot it, or restore
// it from a committed snapshot when Restore is set.
type StartRequest struct {
	Epoch   int64        `json:"epoch"`
	Spec    MachineSpec  `json:"spec"`
	Restore *RestoreSpec `json:"restore,omitempty"`
	// Harness is the chunk manifest of the harness bundle to attach at a
	// boot or a base restore (it replaces the base's); a resume keeps the
	// one its snapshot names (RoleHarness).
	Harness json.RawMessage `json:"harness,omitempty"`
}

// RestoreSpec names the snapshot to restore. The host fetches missing
// chunks, verifies every hash before the VMM starts, restores, then steps
// the guest clock and reseeds its RNG (a new incarnation of that state).
type RestoreSpec struct {
	SnapshotID string          `json:"snapshot_id"`
	Manifests  json.RawMessage `json:"manifests"` // role -> chunk manifest
	// Base: the snapshot is an image's base, shared by every session of the
	// image: the machine gets a new identity (env, hostname, a restarted
	// guest daemon) and its own copy-on-write disk.
	Base bool `json:"base,omitempty"`
}

// CaptureRequest asks a host to make an image's base snapshot: boot the
// root filesystem, run the warm-up, snapshot memory and disk into chunks,
// destroy the machine. The answer comes after every chunk is stored.
type CaptureRequest struct {
	ImageID    string            `json:"image_id"`
	SnapshotID string            `json:"snapshot_id"` // chosen by the coordinator
	RootFS     json.RawMessage   `json:"rootfs"`      // chunk manifest of the root filesystem image
	MemoryMiB  int               `json:"memory_mib"`
	VCPUs      int               `json:"vcpus"`
	Env        map[string]string `json:"env,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	Warmup     string            `json:"warmup,omitempty"` // run with /bin/sh -c; empty: none
	// Deadlines of the warm-up: overall, and without any output.
	WarmupTimeout time.Duration `json:"warmup_timeout_ns"`
	WarmupStall   time.Duration `json:"warmup_stall_ns"`
}

// CaptureResponse is the base snapshot; the coordinator records it on the image.
type CaptureResponse struct {
	SnapshotID string           `json:"snapshot_id"`
	Manifests  json.RawMessage  `json:"manifests"` // role -> chunk manifest, RoleRootFS included
	Facts      domain.HostFacts `json:"facts"`     // restore compatibility
	Bytes      int64            `json:"bytes"`
	Uploaded   int64            `json:"uploaded"`
	OutputTail string           `json:"output_tail,omitempty"` // the warm-up's last output
	StagesMS   map[string]int64 `json:"stages_ms"`             // fetch_rootfs, boot, warmup, snapshot, upload
}

// SnapshotRequest asks a host to capture a machine: quiesce the guest
// (sync filesystems), pause, write memory, device state and disk, upload
// every chunk the store lacks, then destroy the machine (Destroy) or
// resume it. The answer comes only after every chunk is stored.
type SnapshotRequest struct {
	Epoch      int64  `json:"epoch"`
	SnapshotID string `json:"snapshot_id"` // chosen by the coordinator
	Destroy    bool   `json:"destroy"`
}

// SnapshotResponse describes what was uploaded; the coordinator commits it.
type SnapshotResponse struct {
	SnapshotID string           `json:"snapshot_id"`
	Manifests  json.RawMessage  `json:"manifests"` // role -> chunk manifest
	Facts      domain.HostFacts `json:"facts"`     // restore compatibility
	Bytes      int64            `json:"bytes"`
	Uploaded   int64            `json:"uploaded"`
	OutboxSeq  int64            `json:"outbox_seq"` // highest outbox item the guest had applied
	// HarnessSeq is the last harness event the guest had written when it
	// was quiesced; nil for a machine without a harness (unknown).
	HarnessSeq *int64 `json:"harness_seq,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// OutboxItem is one command delivered into a session, applied by the guest
// at most once per incarnation and in seq order.
type OutboxItem struct {
	Seq     int64           `json:"seq"`
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// OutboxDelivery hands items to a machine under the session's epoch.
type OutboxDelivery struct {
	Epoch int64        `json:"epoch"`
	Items []OutboxItem `json:"items"`
}

// OutboxApplied is the highest seq the guest has applied (items at or
// below it that were delivered again are ignored, not applied twice).
type OutboxApplied struct {
	Applied int64 `json:"applied"`
}

// ErrorBody is every non-2xx JSON answer on the link.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"` // "stale_epoch", "version_mismatch", "not_found", "capacity"
	// OutputTail: a failed warm-up's last output (CodeWarmupFailed).
	OutputTail string `json:"output_tail,omitempty"`
}
