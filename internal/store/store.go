package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
)

// Error categories callers branch on. Backends wrap them with the action.
var (
	ErrNotFound     = domain.ErrNotFound             // the same value: callers above the store match domain's category
	ErrStaleEpoch   = errors.New("stale epoch")      // a fenced write lost to a newer claim
	ErrConflict     = domain.ErrConflict             // the row is not in the state the write expected
	ErrOpInProgress = errors.New("op in progress")   // another pending or running op exists for the session
	ErrNoOp         = errors.New("no op to claim")   // ClaimOp found nothing claimable
	ErrJobActive    = errors.New("image job active") // another job of the image is pending, materializing or capturing
)

// NewSession is what CreateSession inserts.
type NewSession struct {
	ID             domain.SessionID
	Spec           domain.SessionSpec
	IdempotencyKey string // "" for none; otherwise unique across sessions
	OpID           string // id of the create op inserted with it
	At             time.Time
}

// Transition is a fenced state change: it applies only while the session
// still has Epoch and From; it also appends a "state" event in the same
// transaction.
type Transition struct {
	SessionID domain.SessionID
	Epoch     int64
	From      domain.SessionState
	To        domain.SessionState
	Event     lifecycle.Event
	HostID    *domain.HostID // set when non-nil
	Reason    *string        // set when non-nil
	// Desired, when non-nil, is recorded in the same fenced write, unless
	// the session is to be deleted (that wish is final).
	Desired *domain.DesiredState
	At      time.Time
}

// NewEvent is an event to append. Epoch > 0 fences it to that epoch.
type NewEvent struct {
	SessionID domain.SessionID
	Type      string
	Data      json.RawMessage
	Epoch     int64
	At        time.Time
}

// Hosts keeps the fleet. Every state the calls below move a host to is what
// hoststate.Transition gives its state for the call's event (SetHostState
// aside, which writes the state it is given).
type Hosts interface {
	// CreateHost inserts a host in state new together with its host token,
	// in one transaction; ErrConflict if the name is taken.
	CreateHost(ctx context.Context, h domain.Host, tok domain.Token) error
	// RegisterHost inserts or replaces a host's name, facts, capacity, replica
	// route and protocol version, sets it ready (draining when its drain flag
	// is set) and stamps heartbeat and connection times with h.LastHeartbeat.
	// It never changes the drain flag (h.Draining is ignored), nor the
	// access and link fields. An existing host that may not work (see
	// ReviveHost) is left as it is: ErrConflict.
	RegisterHost(ctx context.Context, h domain.Host) error
	// HostHeartbeat stamps the heartbeat time and capacity; it returns the
	// host's state (a lost host must reconnect and register again).
	HostHeartbeat(ctx context.Context, hostID domain.HostID, capacity *domain.Capacity, at time.Time) (domain.HostState, error)
	GetHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	ListHosts(ctx context.Context) ([]domain.Host, error)
	// SetHostState forces a state (tests, admin repair); prefer the calls below.
	SetHostState(ctx context.Context, id domain.HostID, state domain.HostState) error
	// SetHostDraining sets the drain flag; a connected host's state follows
	// (ready <-> draining). A new or lost host keeps its state until it
	// registers or is revived.
	SetHostDraining(ctx context.Context, id domain.HostID, draining bool) error
	// ReviveHost moves a lost host back to ready (or draining, per its flag)
	// and returns its state; other states are left as they are (and
	// returned). A host that may not work stays lost: one disabled or
	// deleted, or one with host tokens that are all revoked. ErrNotFound for
	// an unknown host.
	ReviveHost(ctx context.Context, id domain.HostID) (domain.HostState, error)
	// MarkHostsLost moves every ready or draining host whose last heartbeat
	// is before the cutoff to lost (keeping its drain flag) and returns their ids.
	MarkHostsLost(ctx context.Context, cutoff time.Time) ([]domain.HostID, error)
	HostAccess
}

// HostAccess is who may hold a host: one link at a time, and only while an
// admin lets the host work.
type HostAccess interface {
	// ClaimHostLink makes c.Link the link holding host c.HostID and this
	// replica its route, if the host may work (see ReviveHost) and no other
	// live link holds it: none does, the holder is c.Replace or c.Link
	// itself, or the holder connected and last heartbeated before
	// c.StaleBefore. It returns the row after the claim; the row as it is
	// with ErrConflict when another link holds the host or it may not work;
	// ErrNotFound for an unknown host. One conditional write: of concurrent
	// claims at most one wins.
	ClaimHostLink(ctx context.Context, c LinkClaim) (domain.Host, error)
	// ReleaseHostLink ends linkID's hold on the host, if it still holds it.
	ReleaseHostLink(ctx context.Context, id domain.HostID, linkID string) error
	// DisableHost sets or clears the disabled flag and returns the row.
	// Disabling also moves a ready or draining host to lost and ends its
	// link's hold, in the same write. ErrNotFound for an unknown or deleted
	// host.
	DisableHost(ctx context.Context, id domain.HostID, disabled bool) (domain.Host, error)
	// DeleteHost soft-deletes a host in one transaction: it stamps DeletedAt
	// (freeing the name), moves a ready or draining host to lost, ends its
	// link's hold and revokes its tokens. ErrNotFound for an unknown or
	// already deleted host.
	DeleteHost(ctx context.Context, id domain.HostID, at time.Time) (domain.Host, error)
	// MarkHostLost moves a ready or draining host to lost now and ends its
	// link's hold (its token was revoked); it returns the row.
	// ErrNotFound for an unknown host.
	MarkHostLost(ctx context.Context, id domain.HostID) (domain.Host, error)
}

// LinkClaim is a host link taking its host (HostAccess.ClaimHostLink).
type LinkClaim struct {
	HostID      domain.HostID
	Link        domain.HostLink // ID and At are required
	ReplicaID   string          // the replica holding the link, recorded as the host's route
	ReplicaAddr string
	// StaleBefore: a holder that connected and last heartbeated before it
	// is taken over (its host has paused its machines by then).
	StaleBefore time.Time
	// Replace is a holder known to be gone ("" for none).
	Replace string
}

// Sessions keeps sessions and their fenced transitions.
type Sessions interface {
	// CreateSession inserts a session in Created (desired "active", epoch 0),
	// its pending create op and a "created" event, in one transaction. With an
	// idempotency key already used it returns the existing session and its
	// (latest) create op, and created=false — unless that op failed or was
	// superseded: then the key is released and a new session is created
	// (the old one keeps IdempotencyKey as a record).
	CreateSession(ctx context.Context, s NewSession) (sess domain.Session, op domain.Op, created bool, err error)
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	ListSessions(ctx context.Context, f domain.SessionFilter) ([]domain.Session, error)
	// CountSessionsByState counts every session by its state; states
	// without a session are absent.
	CountSessionsByState(ctx context.Context) (map[domain.SessionState]int, error)
	// SetDesiredState records what the coordinator wants; not fenced.
	SetDesiredState(ctx context.Context, id domain.SessionID, desired domain.DesiredState) error
	// TouchSession moves LastActivity forward to at (never backwards); not
	// fenced. Callers rate-limit it.
	TouchSession(ctx context.Context, id domain.SessionID, at time.Time) error
	// ApplyTransition applies t; ErrStaleEpoch if the epoch moved on,
	// ErrConflict if the state is not t.From, ErrNotFound if no such session.
	// The epoch is always checked (0 before the first claim). t.To must be
	// lifecycle.Transition(t.From, t.Event), else an error wrapping
	// lifecycle.ErrIllegal and nothing is written.
	ApplyTransition(ctx context.Context, t Transition) (domain.Session, error)
}

// Ops is the per-session op log.
type Ops interface {
	// EnqueueOp inserts a pending op. If the session already has a pending or
	// running op it returns ErrOpInProgress, unless supersede is set: then
	// that op becomes superseded in the same transaction. A non-empty
	// idempotency key held by a pending, running or succeeded op of the
	// session returns that op; a key whose op failed or was superseded is
	// free again, so a retry inserts a new op.
	EnqueueOp(ctx context.Context, op domain.Op, supersede bool) (domain.Op, error)
	// ClaimOp claims the oldest pending op, or a running op whose lease
	// expired before now: it bumps the session's epoch, and marks the op
	// running with that epoch, claimedBy, lease until now+lease and one more
	// attempt. Concurrent callers never claim the same op. ErrNoOp if none.
	ClaimOp(ctx context.Context, claimedBy string, now time.Time, lease time.Duration) (domain.Op, domain.Session, error)
	// RenewOp extends the lease; fenced by epoch. Like SetOpStep and
	// FinishOp it returns ErrStaleEpoch if the op was claimed again since,
	// ErrConflict if it is no longer running (finished or superseded), and
	// ErrNotFound for an unknown op.
	RenewOp(ctx context.Context, opID string, epoch int64, until time.Time) error
	// DeferOp hands a running op back to be claimed again once until
	// passes, not counting this claim as an attempt (an op waiting for
	// room, not failing); fenced like RenewOp.
	DeferOp(ctx context.Context, opID string, epoch int64, until time.Time) error
	// SetOpStep records progress; fenced by epoch.
	SetOpStep(ctx context.Context, opID string, epoch int64, step string) error
	// FinishOp marks a running op succeeded or failed; fenced by epoch.
	FinishOp(ctx context.Context, opID string, epoch int64, state domain.OpState, errMsg string, at time.Time) error
	GetOp(ctx context.Context, id string) (domain.Op, error)
	ListOps(ctx context.Context, sessionID domain.SessionID) ([]domain.Op, error)
}

// Events is the append-only per-session event log.
type Events interface {
	// AppendEvent appends with the next gap-free seq; ErrStaleEpoch if fenced
	// and the session's epoch differs.
	AppendEvent(ctx context.Context, e NewEvent) (domain.Event, error)
	// ListEvents returns up to limit events with seq > afterSeq, in order;
	// limit <= 0 means no limit.
	ListEvents(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.Event, error)
}

// Snapshots keeps committed snapshots.
type Snapshots interface {
	// CommitSnapshot inserts snap and makes it the session's head in one
	// transaction, only while the session still has epoch (ErrStaleEpoch
	// otherwise; nothing is written). It also marks the session's delivered
	// outbox items with seq <= snap.OutboxSeq durable. The row's ParentID is
	// the previous head and its Epoch is epoch; a non-empty snap.ParentID
	// that is not the head, a reused snapshot id, or a terminal session is
	// ErrConflict, an unknown session ErrNotFound; nothing is written then.
	CommitSnapshot(ctx context.Context, snap domain.Snapshot, epoch int64) error
	GetSnapshot(ctx context.Context, id domain.SnapshotID) (domain.Snapshot, error)
	// ListSnapshots returns a session's snapshots, oldest first.
	ListSnapshots(ctx context.Context, sessionID domain.SessionID) ([]domain.Snapshot, error)
	// ForEachSnapshot calls fn for every snapshot row (GC reachability);
	// fn's error stops it.
	ForEachSnapshot(ctx context.Context, fn func(domain.Snapshot) error) error
	// DeleteSnapshots removes a terminal session's snapshot rows (its chunks
	// become unreachable for GC) and clears its head. ErrConflict unless the
	// session is terminal, ErrNotFound for an unknown session.
	DeleteSnapshots(ctx context.Context, sessionID domain.SessionID) error
}

// Outbox keeps commands sent into sessions.
type Outbox interface {
	// PutOutbox appends a pending item with the next seq (ErrNotFound for
	// an unknown session); an ID already used for the session returns the
	// existing item and created=false.
	PutOutbox(ctx context.Context, it domain.OutboxItem) (item domain.OutboxItem, created bool, err error)
	// ListOutbox returns up to limit items with seq > afterSeq, in order;
	// limit <= 0 means no limit.
	ListOutbox(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.OutboxItem, error)
	// MarkDelivered records that the guest applied every item with seq <=
	// through; fenced by epoch (ErrStaleEpoch, or ErrNotFound for an unknown
	// session). Items already delivered or durable are left.
	MarkDelivered(ctx context.Context, sessionID domain.SessionID, through int64, epoch int64, at time.Time) error
	// RollbackOutbox returns delivered (not durable) items with seq > after
	// to pending: the incarnation that applied them was lost and the session
	// resumes from a snapshot taken before them. Fenced by epoch.
	RollbackOutbox(ctx context.Context, sessionID domain.SessionID, after int64, epoch int64) error
}

// Tokens keeps hashed credentials.
type Tokens interface {
	CreateToken(ctx context.Context, t domain.Token) error
	// TokenByHash returns the unrevoked token with that hash, else ErrNotFound.
	TokenByHash(ctx context.Context, hash string) (domain.Token, error)
	// GetToken returns the token with that id, revoked or not.
	GetToken(ctx context.Context, id string) (domain.Token, error)
	ListTokens(ctx context.Context, f TokenFilter) ([]domain.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	TouchToken(ctx context.Context, id string, at time.Time) error
}

// TokenFilter narrows ListTokens; a zero field matches all.
type TokenFilter = domain.TokenFilter

// People keeps organisations, users and their roles.
type People interface {
	CreateOrg(ctx context.Context, o domain.Org) error // ErrConflict: the id or name is taken
	GetOrg(ctx context.Context, id domain.OrgID) (domain.Org, error)
	// CreateUser inserts a user; ErrConflict if the id or email is taken.
	CreateUser(ctx context.Context, u domain.User) error
	GetUser(ctx context.Context, id domain.UserID) (domain.User, error)
	// UserByEmail finds a user by email, compared in lower case.
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	// PutMember adds a user to an organisation or changes their role.
	PutMember(ctx context.Context, org domain.OrgID, user domain.UserID, role domain.Role, at time.Time) error
	// GetMember is a user's membership; ErrNotFound when they are not one.
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
	// ListMembers lists an organisation's members, oldest first.
	ListMembers(ctx context.Context, org domain.OrgID) ([]domain.Member, error)
	// Memberships lists the organisations a user is a member of, oldest
	// membership first.
	Memberships(ctx context.Context, user domain.UserID) ([]domain.Member, error)
	// SetMemberGroups replaces the groups a member is in (what profile
	// grants name); ErrNotFound when they are not a member.
	SetMemberGroups(ctx context.Context, org domain.OrgID, user domain.UserID, groups []string) error
	// RemoveMember removes a membership and revokes the user's personal
	// keys in that organisation, in one transaction.
	RemoveMember(ctx context.Context, org domain.OrgID, user domain.UserID, at time.Time) error
}

// Audit keeps the audit log.
type Audit interface {
	AppendAudit(ctx context.Context, e domain.AuditEvent) error
	// ListAudit pages an organisation's events, newest first: those before
	// the (At, ID) of the cursor event when before is set.
	ListAudit(ctx context.Context, org domain.OrgID, before *domain.AuditEvent, limit int) ([]domain.AuditEvent, error)
}

// JobProgress is a fenced progress write of a claimed image job.
type JobProgress struct {
	ID         domain.ImageJobID
	Epoch      int64                // the epoch ClaimJob returned
	State      domain.ImageJobState // materializing or capturing
	Stage      string
	Done       int64
	Total      int64
	LeaseUntil time.Time       // extends the lease; zero keeps it
	Digest     string          // "" keeps it
	Stages     json.RawMessage // nil keeps it
	Warnings   []string        // nil keeps them; empty clears them
}

// Images keeps enabled images and their enable/refresh jobs.
type Images interface {
	// CreateImage inserts img (Org required; State "" means ready;
	// UpdatedAt follows CreatedAt). ErrConflict if the id is taken or an
	// image of img.Org that is not disabled has the name.
	CreateImage(ctx context.Context, img domain.Image) error
	GetImage(ctx context.Context, id domain.ImageID) (domain.Image, error)
	// GetImageByName returns org's image with that name that is not
	// disabled, else ErrNotFound.
	GetImageByName(ctx context.Context, org domain.OrgID, name string) (domain.Image, error)
	// ListImages returns org's images, disabled ones too, by name then
	// id; org "" lists every organisation's (the fleet's view: prefetch,
	// garbage collection).
	ListImages(ctx context.Context, org domain.OrgID) ([]domain.Image, error)
	// UpdateImage rewrites every field of the image with img.ID but ID and
	// CreatedAt, stamping UpdatedAt with at. ErrNotFound for an unknown
	// image, ErrConflict if it would share a name with another live image
	// of its organisation.
	UpdateImage(ctx context.Context, img domain.Image, at time.Time) error
	// SetImageState sets only the state (disable, or enable again); errors
	// as UpdateImage.
	SetImageState(ctx context.Context, id domain.ImageID, state domain.ImageState, at time.Time) error
	// CreateJob inserts a pending job (State must be "" or pending; zero
	// counters). ErrJobActive if another job of the image is active,
	// ErrNotFound for an unknown image, ErrConflict for a reused id.
	CreateJob(ctx context.Context, j domain.ImageJob) (domain.ImageJob, error)
	GetJob(ctx context.Context, id domain.ImageJobID) (domain.ImageJob, error)
	// ListJobs returns an image's jobs, oldest first.
	ListJobs(ctx context.Context, imageID domain.ImageID) ([]domain.ImageJob, error)
	// ClaimJob claims a pending job, or a materializing or capturing one
	// whose lease ended before at (its runner died): it bumps the epoch,
	// sets the lease to at+lease, the state to materializing (what
	// imagejobs.Transition gives a claim), one more attempt, an empty stage
	// and zero bytes (digest, stages and warnings are kept), and returns the
	// row. One conditional write: of concurrent claimers
	// exactly one wins. ErrConflict while another lease is live or once the
	// job finished, ErrNotFound for an unknown job.
	ClaimJob(ctx context.Context, id domain.ImageJobID, lease time.Duration, at time.Time) (domain.ImageJob, error)
	// ListClaimableJobs returns up to limit jobs ClaimJob would take at
	// at (pending, or active with an ended lease), oldest first; limit <= 0
	// means no limit.
	ListClaimableJobs(ctx context.Context, at time.Time, limit int) ([]domain.ImageJob, error)
	// UpdateJobProgress records a claimed job's state (materializing or
	// capturing), stage and bytes, and optionally extends its lease and
	// records its digest, stages and warnings. Fenced: ErrStaleEpoch if the job was
	// claimed again since p.Epoch, ErrConflict if it is not claimed (pending,
	// ready or failed), ErrNotFound for an unknown job; nothing is written then.
	UpdateJobProgress(ctx context.Context, p JobProgress, at time.Time) error
	// FinishJob moves a claimed job to ready or failed with its error and
	// output tail (stages nil keeps them); fenced as UpdateJobProgress.
	FinishJob(ctx context.Context, id domain.ImageJobID, epoch int64, state domain.ImageJobState, errMsg, tail string, stages json.RawMessage, at time.Time) error
	// CompleteImageJob, in one transaction, finishes the claimed job jobID
	// ready (what imagejobs.Transition gives a success; stages nil keeps
	// them) and records what it made on image img.ID: only Digest, Config,
	// Manifests, Facts and BaseID are written (name, ref, state and
	// credential stay as they are now). The job must belong
	// to img.ID (else ErrConflict) and is fenced as UpdateJobProgress; an
	// unknown image is ErrNotFound, an image disabled meanwhile ErrConflict.
	// Nothing is written on any error.
	CompleteImageJob(ctx context.Context, jobID domain.ImageJobID, epoch int64, img domain.Image, stages json.RawMessage, at time.Time) error
}

// Credentials keeps sealed registry credentials; images name them by id.
type Credentials interface {
	// PutCredential inserts c; ErrConflict if the id is taken.
	PutCredential(ctx context.Context, c domain.RegistryCredential) error
	GetCredential(ctx context.Context, id string) (domain.RegistryCredential, error)
	// DeleteCredential removes it; deleting an unknown id is not an error.
	DeleteCredential(ctx context.Context, id string) error
}

// Sealed reaches every value sealed at rest (domain.SealedKinds), to re-seal
// them under a new key.
type Sealed interface {
	// ListSealed returns up to limit rows of kind that hold a sealed value
	// (deleted secrets hold none), with ids above after, by id.
	ListSealed(ctx context.Context, kind domain.SealedKind, after string, limit int) ([]domain.SealedValue, error)
	// ReplaceSealed sets the sealed value of row id of kind to sealed, only
	// while it is still old: one conditional write. ErrConflict if it
	// changed meanwhile (re-sealed, or the secret deleted); ErrNotFound if
	// there is no such row.
	ReplaceSealed(ctx context.Context, kind domain.SealedKind, id string, old, sealed []byte) error
}

// Store is everything a backend provides. Times are kept at microsecond
// precision and read back in UTC; a zero time given to a write means now.
type Store interface {
	Hosts
	Sessions
	Ops
	Events
	Snapshots
	Outbox
	Tokens
	Images
	Credentials
	Sealed
	Harnesses
	Secrets
	Profiles
	Tasks
	Egress
	Idempotency
	Automations
	Integrations
	People
	Audit
	// Notify wakes waiters on every replica sharing this database: topic is
	// e.g. "ops", "session:<id>" or "task:<id>". Subscribe returns a channel
	// that receives a value (coalesced) after each Notify on that topic,
	// until ctx ends.
	// The channel is closed when ctx ends or the store closes. Wake-ups are
	// hints: a subscriber may be woken spuriously and must re-read state.
	Notify(ctx context.Context, topic string) error
	Subscribe(ctx context.Context, topic string) <-chan struct{}
	// Ready reports whether the database answers and has every migration
	// this build knows applied (a newer schema also counts); the error
	// says why not.
	Ready(ctx context.Context) error
	Close() error
}
