package apiv1

import (
	"encoding/json"
	"time"
)

// PathPrefix starts the path of every route of this version.
const PathPrefix = "/v1/"

// Routes (Go 1.22 ServeMux patterns).
const (
	RouteVersion       = "GET /v1/version"
	RouteCreateSession = "POST /v1/sessions" // ?wait=false returns at once
	RouteListSessions  = "GET /v1/sessions"  // ?state=&host=
	RouteGetSession    = "GET /v1/sessions/{id}"
	RouteDeleteSession = "DELETE /v1/sessions/{id}"         // ?wait=false returns at once
	RouteExec          = "POST /v1/sessions/{id}/exec"      // ExecRequest -> NDJSON ExecFrame stream
	RouteExecWS        = "GET /v1/sessions/{id}/exec/ws"    // WebSocket: ExecStart, Chan* frames, ExecControl
	RouteFileGet       = "GET /v1/sessions/{id}/files"      // ?path=
	RouteFilePut       = "PUT /v1/sessions/{id}/files"      // ?path=&mode=
	RouteFileList      = "GET /v1/sessions/{id}/files/list" // ?path= -> JSON array of FileInfo
	RouteFileStat      = "GET /v1/sessions/{id}/files/stat" // ?path= -> FileInfo
	RouteEvents        = "GET /v1/sessions/{id}/events"     // SSE; ?follow=false ends after backlog; Last-Event-ID or ?after=
	RouteSuspend       = "POST /v1/sessions/{id}/suspend"   // snapshot, then free the host -> Session (idle); ?wait=false
	RouteResume        = "POST /v1/sessions/{id}/resume"    // restore the head snapshot -> Session (active)
	RouteSnapshot      = "POST /v1/sessions/{id}/snapshot"  // snapshot and keep running -> Snapshot
	RouteOutboxPut     = "POST /v1/sessions/{id}/outbox"    // OutboxRequest -> OutboxItem (exactly once per id)
	RouteOutboxList    = "GET /v1/sessions/{id}/outbox"     // -> OutboxList
	RouteListHosts     = "GET /v1/hosts"                    // hosts not deleted
	RouteGetHost       = "GET /v1/hosts/{id}"               // {id}: a host's id or name (of a host not deleted)
	RouteDrainHost     = "POST /v1/hosts/{id}/drain"        // -> Host: its drain flag set (kept across reconnects)
	RouteUndrainHost   = "POST /v1/hosts/{id}/undrain"      // -> Host: its drain flag cleared
	RouteDisableHost   = "POST /v1/hosts/{id}/disable"      // -> Host: its link closed, no sessions placed, its sessions recovered
	RouteEnableHost    = "POST /v1/hosts/{id}/enable"       // -> Host: it works again once its agent reconnects
	RouteDeleteHost    = "DELETE /v1/hosts/{id}"            // -> Host (deleted): as disable, and its tokens revoked, its name free
	RouteCreateHost    = "POST /v1/hosts"                   // CreateHostRequest -> CreateHostResponse (host token shown once)
	RouteCreateToken   = "POST /v1/tokens"                  // CreateTokenRequest -> CreateTokenResponse (shown once)
	RouteListTokens    = "GET /v1/tokens"
	RouteRevokeToken   = "DELETE /v1/tokens/{id}" // a host token's host loses its link and sessions at once
	RouteOpenAPI       = "GET /v1/openapi.yaml"   // the OpenAPI document (package api), no auth

	RouteEnableImage  = "POST /v1/images"                // EnableImageRequest -> ImageJobResponse (202; 200 when the digest is already ready)
	RouteListImages   = "GET /v1/images"                 // ?all=true includes disabled -> ImageList
	RouteGetImage     = "GET /v1/images/{name}"          // name or id -> Image
	RouteDisableImage = "DELETE /v1/images/{name}"       // -> Image (disabled); running sessions keep theirs
	RouteRefreshImage = "POST /v1/images/{name}/refresh" // re-pull the tag -> ImageJobResponse
	RouteImageJobs    = "GET /v1/images/{name}/jobs"     // -> ImageJobList, oldest first
	RouteGetImageJob  = "GET /v1/image-jobs/{id}"        // -> ImageJob
)

// SSE framing of RouteEvents: each event is one message with
// `id: <Event.Seq>`, `event: <Event.Type>` and `data: <Event as one line of
// JSON>`. A followed stream ends once the session is terminal and every
// event was sent; a client tells that from a dropped connection by the
// session's state. A server may also end a stream with one message
// `event: end` (EventStreamEnd) that has no id and `data: {}`: a client
// seeing it stops instead of reconnecting. Lines starting with ':' are
// keep-alive comments.
const EventStreamEnd = "end"

// HeaderSessionEpoch, on the answer of RouteExec and RouteExecWS, is the
// session's epoch when the command started. A stream that ends without an
// exit is explained by the session's ops with a greater epoch: an evict
// means the session was suspended under the command.
const HeaderSessionEpoch = "Engrams-Session-Epoch"

// HeaderLastEventID is the SSE resume header of RouteEvents: events with a
// seq greater than its value are sent. The ?after= query does the same.
const HeaderLastEventID = "Last-Event-ID"

// Lists are paged: ?limit= (1 to MaxPageLimit; default DefaultPageLimit)
// and ?cursor= (a list's NextCursor, opaque), in a stable order.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 500
)

// HeaderIdempotencyKey, on a POST, makes a retry safe: the first request
// with a key runs, and for a day the caller's later requests with it get
// the same answer (with HeaderIdempotentReplayed: true) without running
// again. A key reused for another route or body is 409; so is one whose
// first request still runs. Only 2xx answers are kept; after any other a
// retry runs again. At most 255 printable ASCII characters.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// Error is every non-2xx JSON body.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"` // one of the Code* constants
}

// Error codes of Error.Code.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden" // the caller's role does not allow this
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeTooLarge         = "too_large"
	CodeUnavailable      = "unavailable"
	CodeTimeout          = "timeout" // a server-side wait ran out; the operation goes on
	CodeInternal         = "internal"
	// CodeNoCapacity (503, with Retry-After): every host that could run
	// the session is full and nothing could be evicted in time; nothing was
	// started (a create leaves no live session, a resume leaves it idle).
	CodeNoCapacity = "no_capacity"
)

// Version answers RouteVersion.
type Version struct {
	Version          string `json:"version"`
	HostlinkProtocol int    `json:"hostlink_protocol"`
	GuestAPI         int    `json:"guest_api"`
	ReplicaID        string `json:"replica_id"`
}

// SessionSpec is what a session is created with.
type SessionSpec struct {
	MemoryMiB int               `json:"memory_mib,omitempty"` // default from config
	VCPUs     int               `json:"vcpus,omitempty"`      // default 1
	Env       map[string]string `json:"env,omitempty"`
	Image     string            `json:"image,omitempty"`   // an enabled image's name
	Harness   string            `json:"harness,omitempty"` // an agent harness: NAME (newest) or NAME@VERSION
	// IdleTimeoutSec: suspend after this long without activity (0: server
	// default; -1: never).
	IdleTimeoutSec int `json:"idle_timeout_s,omitempty"`
	// MaxLifetimeSec: hard time limit; the session ends Dead this long
	// after it was created, whatever it is doing (0: server default; -1:
	// none).
	MaxLifetimeSec int `json:"max_lifetime_s,omitempty"`
	// Egress lists the hosts the guest may reach ("name", "name:port",
	// "*.suffix[:port]"); the harness's own hosts are added. Empty: no
	// network at all.
	Egress []string `json:"egress,omitempty"`
}

// CreateSessionRequest is the body of RouteCreateSession.
type CreateSessionRequest struct {
	SessionSpec
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Session is a session as the API shows it.
type Session struct {
	ID           string      `json:"id"`
	State        string      `json:"state"`
	DesiredState string      `json:"desired_state"`
	HostID       string      `json:"host_id,omitempty"`
	Epoch        int64       `json:"epoch"`
	Reason       string      `json:"reason,omitempty"`
	Spec         SessionSpec `json:"spec"`
	HeadSnapshot string      `json:"head_snapshot_id,omitempty"`
	LastActivity time.Time   `json:"last_activity,omitzero"`
	CreatedAt    time.Time   `json:"created_at"`
	UpdatedAt    time.Time   `json:"updated_at"`
	Ops          []Op        `json:"ops,omitempty"`       // on get only
	Snapshots    []Snapshot  `json:"snapshots,omitempty"` // on get only, oldest first
	// Suspend is how the suspend that answers ended (RouteSuspend only,
	// when it waited): the session may have moved on since.
	Suspend *SuspendOutcome `json:"suspend,omitempty"`
}

// SuspendOutcome is how a suspend ended: the snapshot it committed even
// when a request resumed the session right after, or why it did not.
type SuspendOutcome struct {
	Result     string `json:"result"`                // Suspend*
	SnapshotID string `json:"snapshot_id,omitempty"` // committed by the suspend (already_idle: the head)
	OpID       string `json:"op_id,omitempty"`       // the evict op
	Why        string `json:"why,omitempty"`         // failed, superseded: what happened
}

// Results of SuspendOutcome.
const (
	SuspendSuspended    = "suspended"     // idle at SnapshotID
	SuspendResumedSince = "resumed_since" // suspended at SnapshotID, then a request (exec, file, outbox, resume) resumed it
	SuspendEndedSince   = "ended_since"   // suspended at SnapshotID, then deleted or dead
	SuspendAlreadyIdle  = "already_idle"  // nothing to do
	SuspendFailed       = "failed"        // the snapshot failed; the session runs on
	SuspendSuperseded   = "superseded"    // a newer operation (a delete) took the session first
)

// Snapshot is one committed snapshot of a session.
type Snapshot struct {
	ID        string    `json:"id"`
	ParentID  string    `json:"parent_id,omitempty"`
	HostID    string    `json:"host_id"`
	Reason    string    `json:"reason"`
	Bytes     int64     `json:"bytes"`
	Uploaded  int64     `json:"uploaded"`
	CreatedAt time.Time `json:"created_at"`
}

// OutboxRequest sends a command into a session; ID makes it exactly-once.
type OutboxRequest struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// OutboxItem is a command and where it is: pending, delivered (applied by
// the running guest) or durable (a committed snapshot includes it).
type OutboxItem struct {
	Seq       int64           `json:"seq"`
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	State     string          `json:"state"`
	CreatedAt time.Time       `json:"created_at"`
}

// OutboxList answers RouteOutboxList.
type OutboxList struct {
	Items []OutboxItem `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// Op kinds as the API shows them (Op.Kind).
const (
	OpCreate   = "create"
	OpResume   = "resume"
	OpSuspend  = "suspend" // servers before issue 26 said "evict"
	OpSnapshot = "snapshot"
	OpDestroy  = "destroy"
	OpMove     = "move"
	OpRecover  = "recover" // the session's host was lost
	OpExpire   = "expire"  // the session's time limit passed
)

// Op is one op log row.
type Op struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"` // OpCreate, OpSuspend, …
	State     string    `json:"state"`
	Step      string    `json:"step,omitempty"`
	Epoch     int64     `json:"epoch"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SessionList answers RouteListSessions.
type SessionList struct {
	Items []Session `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// ExecRequest is the body of RouteExec.
type ExecRequest struct {
	Argv      []string          `json:"argv"`
	Env       map[string]string `json:"env,omitempty"`
	Dir       string            `json:"dir,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Stdin     []byte            `json:"stdin,omitempty"` // base64 in JSON
}

// ExecFrame is one NDJSON line of RouteExec's answer: "stdout"/"stderr"
// with Data, then exactly one "exit".
type ExecFrame struct {
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"` // base64 in JSON
	ExitCode int    `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// Event is one session event; in SSE its seq is the event id.
type Event struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
	Time time.Time       `json:"time"`
}

// Host is a host as the API shows it.
type Host struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"` // ready, draining, lost, "new" before it first connects; "disabled" or "deleted" by an admin
	// Draining is the drain flag (an admin's intent, kept across
	// reconnects and loss): a connected host with it is draining.
	Draining  bool      `json:"draining"`
	Facts     HostFacts `json:"facts"`
	Capacity  Capacity  `json:"capacity"`
	ReplicaID string    `json:"replica_id,omitempty"`
	// ConnectedFrom is the address of the host's live link ("" while none
	// holds it).
	ConnectedFrom string    `json:"connected_from,omitempty"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	CreatedAt     time.Time `json:"created_at"`
	DeletedAt     time.Time `json:"deleted_at,omitzero"`
}

// HostFacts describe a host (the OpenAPI schema Facts); several are part of
// a snapshot's identity.
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
	MemoryMiB       int      `json:"memory_mib"`
	VCPUs           int      `json:"vcpus"`
	MaxSessions     int      `json:"max_sessions"`
	UsedMemoryMiB   int      `json:"used_memory_mib"`
	UsedVCPUs       int      `json:"used_vcpus"`
	Sessions        int      `json:"sessions"`
	CachedSnapshots []string `json:"cached_snapshots,omitempty"` // snapshots whose chunks the host caches (its last heartbeat); resumes of them prefer it
	// EvictIdleAfterSec is the host's eviction floor (engrams host run
	// --evict-idle-after): to make room when every host is full, its
	// sessions idle this many seconds may be suspended. 0: the server's
	// default; -1: never.
	EvictIdleAfterSec int `json:"evict_idle_after_s,omitempty"`
}

// HostList answers RouteListHosts.
type HostList struct {
	Items []Host `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// CreateHostRequest registers a host name and mints its credential.
type CreateHostRequest struct {
	Name string `json:"name"`
}

// CreateHostResponse carries the host token; it is shown only here.
type CreateHostResponse struct {
	Host  Host   `json:"host"`
	Token string `json:"token"`
}

// CreateTokenRequest mints an API key: a personal key (the default) acts
// as its maker, a service key (admins only) as itself. Role defaults to
// the caller's and may not exceed it; ExpiresIn (seconds, or "30d"-style
// durations as ParseSeconds reads them; 0 or "never": no expiry).
type CreateTokenRequest struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind,omitempty"` // KeyPersonal (default) or KeyService
	Role      string  `json:"role,omitempty"`
	ExpiresIn Seconds `json:"expires_in,omitempty"`
}

// Token is a key as listed; the secret is never shown again.
type Token struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Kind       string    `json:"kind"` // KeyPersonal, KeyService or KeyHost
	HostID     string    `json:"host_id,omitempty"`
	UserID     string    `json:"user_id,omitempty"` // a personal key's owner, a service key's maker
	Role       string    `json:"role,omitempty"`
	Prefix     string    `json:"prefix"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at,omitempty"`
	LastUsedAt time.Time `json:"last_used_at,omitempty"`
}

// CreateTokenResponse carries the secret once.
type CreateTokenResponse struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}

// TokenList answers RouteListTokens.
type TokenList struct {
	Items []Token `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// EnableImageRequest enables an OCI image: pull its linux/amd64 entry,
// build its root filesystem, boot it, run Warmup and keep the base snapshot
// sessions start from.
type EnableImageRequest struct {
	Ref            string            `json:"ref"`                        // e.g. registry.example.com/team/app:1.4 or …@sha256:…
	Name           string            `json:"name,omitempty"`             // default: the repository's last path element
	Env            map[string]string `json:"env,omitempty"`              // for the warm-up and every session
	MemoryMiB      int               `json:"memory_mib,omitempty"`       // default 512; sessions from the image get this
	VCPUs          int               `json:"vcpus,omitempty"`            // default 1
	DiskGiB        int               `json:"disk_gib,omitempty"`         // root disk size, default 4
	Workdir        string            `json:"workdir,omitempty"`          // default: the image's WORKDIR, else /
	Warmup         string            `json:"warmup,omitempty"`           // shell command run once before the base snapshot
	WarmupTimeoutS int               `json:"warmup_timeout_s,omitempty"` // overall warm-up limit, default 600
	WarmupStallS   int               `json:"warmup_stall_s,omitempty"`   // no output this long fails the warm-up, default 120
	Credentials    *RegistryAuth     `json:"credentials,omitempty"`      // stored encrypted, never returned
}

// RegistryAuth is how to log in to the image's registry: Username and
// Password (basic, or exchanged for a bearer token), or a bearer Token.
type RegistryAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

// Image states as the API shows them.
const (
	ImageStatePending  = "pending"  // enabled, its first job has not finished
	ImageStateReady    = "ready"    // sessions can start from its base snapshot
	ImageStateFailed   = "failed"   // its last job failed and it has no base snapshot
	ImageStateDisabled = "disabled" // kept as a record
)

// Image is an enabled OCI image.
type Image struct {
	ID             string      `json:"id"`
	Name           string      `json:"name"`
	Ref            string      `json:"ref"`
	Digest         string      `json:"digest,omitempty"`
	State          string      `json:"state"` // ImageState*
	Config         ImageConfig `json:"config"`
	Credentials    string      `json:"credentials,omitempty"` // "user@registry" or "token@registry"; the secret is never shown
	BaseSnapshotID string      `json:"base_snapshot_id,omitempty"`
	Facts          *HostFacts  `json:"facts,omitempty"`       // host the base snapshot was captured on: sessions restore only on compatible hosts
	ReadyHosts     []string    `json:"ready_hosts,omitempty"` // hosts holding every chunk of the base snapshot
	LastJob        *ImageJob   `json:"last_job,omitempty"`
	CreatedAt      time.Time   `json:"created_at"`
	UpdatedAt      time.Time   `json:"updated_at"`
}

// ImageConfig is how sessions of an image run.
type ImageConfig struct {
	Env            map[string]string `json:"env,omitempty"`
	MemoryMiB      int               `json:"memory_mib"`
	VCPUs          int               `json:"vcpus"`
	DiskGiB        int               `json:"disk_gib"`
	Workdir        string            `json:"workdir,omitempty"`
	Warmup         string            `json:"warmup,omitempty"`
	WarmupTimeoutS int               `json:"warmup_timeout_s"`
	WarmupStallS   int               `json:"warmup_stall_s"`
	Libc           string            `json:"libc,omitempty"` // glibc, musl or none (static only), as found in the image
	User           string            `json:"user,omitempty"` // the image's USER
	Entrypoint     []string          `json:"entrypoint,omitempty"`
}

// Image job states as the API shows them.
const (
	ImageJobPending       = "pending"
	ImageJobMaterializing = "materializing" // pulling the image and building its root filesystem
	ImageJobCapturing     = "capturing"     // booting it, warming it up, taking the base snapshot
	ImageJobReady         = "ready"
	ImageJobFailed        = "failed"
)

// ImageJob is one enable or refresh: pending -> materializing -> capturing
// -> ready | failed, with its progress.
type ImageJob struct {
	ID         string           `json:"id"`
	ImageID    string           `json:"image_id"`
	Kind       string           `json:"kind"`  // enable, refresh
	State      string           `json:"state"` // pending, materializing, capturing, ready, failed
	Stage      string           `json:"stage,omitempty"`
	BytesDone  int64            `json:"bytes_done"`
	BytesTotal int64            `json:"bytes_total"`
	Attempts   int              `json:"attempts"`
	Error      string           `json:"error,omitempty"`
	OutputTail string           `json:"output_tail,omitempty"` // the warm-up's last output
	StagesMS   map[string]int64 `json:"stages_ms,omitempty"`   // how long each finished stage took
	Warnings   []string         `json:"warnings,omitempty"`    // what the image lost on the way (device nodes left out, …)
	CreatedAt  time.Time        `json:"created_at"`
	UpdatedAt  time.Time        `json:"updated_at"`
}

// ImageJobResponse answers enable and refresh.
type ImageJobResponse struct {
	Image Image    `json:"image"`
	Job   ImageJob `json:"job"`
}

// ImageList answers RouteListImages.
type ImageList struct {
	Items []Image `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
	// Defaults are what an enable request leaving a setting out gets, and
	// the bounds of each (the server's answer always has them).
	Defaults *ImageDefaults `json:"defaults,omitempty"`
}

// ImageDefaults are this server's image settings for an EnableImageRequest
// that leaves them out (0 or absent), and their upper bounds.
type ImageDefaults struct {
	MemoryMiB      int `json:"memory_mib"`
	VCPUs          int `json:"vcpus"`
	DiskGiB        int `json:"disk_gib"`
	WarmupTimeoutS int `json:"warmup_timeout_s"`
	WarmupStallS   int `json:"warmup_stall_s"`
	MaxMemoryMiB   int `json:"max_memory_mib"`
	MaxVCPUs       int `json:"max_vcpus"`
	MaxDiskGiB     int `json:"max_disk_gib"`
}

// ImageJobList answers RouteImageJobs.
type ImageJobList struct {
	Items []ImageJob `json:"items"` // never null
	// NextCursor is the ?cursor= of the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}
