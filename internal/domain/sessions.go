package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Session is one sandbox. State is observed state; DesiredState is what the
// coordinator wants.
type Session struct {
	ID             SessionID
	State          SessionState
	DesiredState   DesiredState
	HostID         HostID // "" while the session has no VM
	Epoch          int64  // bumped on every op claim
	Reason         string // why it is Dead, or the last failure
	Spec           SessionSpec
	IdempotencyKey string
	EventSeq       int64      // index of the last event appended
	HeadSnapshotID SnapshotID // the committed snapshot a resume restores; "" before the first
	LastActivity   time.Time  // last exec, file operation or prompt (idle eviction clock); starts at CreatedAt
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// RunsOn reports whether s has a VM on host at epoch: the fence of what a
// host reports about a session's guest (events, bounds, egress).
func (s Session) RunsOn(host HostID, epoch int64) bool {
	return s.HostID == host && s.Epoch == epoch && s.State.HasVM()
}

// Where says where s runs, for a refusal of a report RunsOn fences out.
func (s Session) Where() string {
	return fmt.Sprintf("session %s is %s on host %s at epoch %d", s.ID, s.State, s.HostID, s.Epoch)
}

// Snapshot is a committed, restorable state of a session: every chunk its
// manifests name was uploaded before the row was inserted.
type Snapshot struct {
	ID        SnapshotID
	SessionID SessionID
	ParentID  SnapshotID      // the session's previous head, "" for the first
	HostID    HostID          // host that captured it
	Epoch     int64           // epoch of the op that captured it
	Manifests json.RawMessage // role ("memory", "state", "disk", ...) -> chunk manifest; opaque here
	Facts     HostFacts       // host facts deciding restore compatibility
	Bytes     int64           // logical bytes of all files
	Uploaded  int64           // bytes uploaded for this snapshot (chunks the store lacked)
	OutboxSeq int64           // highest outbox item the guest had applied when captured
	// HarnessSeq is the last harness event the guest had written when
	// captured; -1 when unknown.
	HarnessSeq int64
	Reason     string // "suspend", "snapshot", "idle"
	CreatedAt  time.Time
}

// OutboxState is where an outbox item is.
type OutboxState string

const (
	OutboxPending   OutboxState = "pending"   // not yet handed to the guest (or handed to a lost incarnation)
	OutboxDelivered OutboxState = "delivered" // the guest applied it; not yet covered by a snapshot
	OutboxDurable   OutboxState = "durable"   // a committed snapshot includes its effect
)

// OutboxItem is one command sent into a session (a prompt, later), applied
// exactly once and in order, across resumes and host loss.
type OutboxItem struct {
	SessionID      SessionID
	Seq            int64  // gap-free per session, from 1
	ID             string // caller's idempotency id, unique per session
	Kind           string
	Payload        json.RawMessage
	State          OutboxState
	DeliveredEpoch int64
	CreatedAt      time.Time
	DeliveredAt    time.Time
}

// OpKind is a lifecycle operation.
type OpKind string

const (
	OpCreate   OpKind = "create"
	OpResume   OpKind = "resume"
	OpEvict    OpKind = "evict" // a suspend, stored under this name (Word says "suspend")
	OpDestroy  OpKind = "destroy"
	OpMove     OpKind = "move"
	OpRecover  OpKind = "recover"  // the session's host was lost
	OpSnapshot OpKind = "snapshot" // snapshot and keep running
	OpExpire   OpKind = "expire"   // hard time limit passed: destroy, end Dead
)

// Word is the kind as users see it (the API, its errors, the CLI and the
// dashboard): one word per concept, so OpEvict, stored as "evict" in the
// rows already written, is a "suspend".
func (k OpKind) Word() string {
	if k == OpEvict {
		return "suspend"
	}
	return string(k)
}

// OpState is where an op is.
type OpState string

const (
	OpPending    OpState = "pending"
	OpRunning    OpState = "running"
	OpSucceeded  OpState = "succeeded"
	OpFailed     OpState = "failed"
	OpSuperseded OpState = "superseded" // replaced by a newer op before it finished
)

// Op is one row of a session's op log. At most one op per session is
// pending or running at a time.
type Op struct {
	ID             string
	SessionID      SessionID
	Kind           OpKind
	State          OpState
	Step           string
	Epoch          int64 // the session epoch this op claimed; 0 until claimed
	IdempotencyKey string
	Attempts       int
	Error          string
	ClaimedBy      string
	LeaseUntil     time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Event is one entry of a session's append-only event log. Seq is gap-free
// per session, starting at 1.
type Event struct {
	SessionID SessionID
	Seq       int64
	Type      string
	Data      json.RawMessage
	CreatedAt time.Time
}

// SessionFilter narrows ListSessions. Zero fields match everything.
type SessionFilter struct {
	// Viewer, when set, keeps the sessions it Sees (the API's lists);
	// nil is every session (the coordinator's).
	Viewer  *Viewer
	HostID  HostID
	States  []SessionState
	Limit   int       // 0 means no limit
	AfterID SessionID // keyset pagination: ids greater than this
}
