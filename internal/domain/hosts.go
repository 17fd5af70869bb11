package domain

import (
	"time"
)

// HostState is the coordinator's view of a host; hoststate.Transition is
// the one rule of its changes.
type HostState string

const (
	HostNew      HostState = "new"      // created by an admin, never connected
	HostReady    HostState = "ready"    // connected and accepting sessions
	HostDraining HostState = "draining" // connected, no new sessions
	HostLost     HostState = "lost"     // heartbeats stopped
)

// Host is a machine that runs sessions. It dials a coordinator replica and
// stays connected; ReplicaAddr is the internal address of that replica.
type Host struct {
	ID              HostID
	Name            string
	State           HostState
	Facts           HostFacts
	Capacity        Capacity
	ReplicaID       string
	ReplicaAddr     string
	ProtocolVersion int
	Draining        bool // admin intent; survives reconnects and loss
	// Disabled is admin intent too: a disabled host may not link, take
	// sessions or use the gateway until it is enabled again.
	Disabled bool
	// DeletedAt is when an admin deleted the host (zero while it is not):
	// its row stays for the sessions and snapshots that name it, its tokens
	// are revoked and its name is free again.
	DeletedAt     time.Time
	Link          HostLink // the link holding the host (or the last one, with ID "")
	LastHeartbeat time.Time
	ConnectedAt   time.Time
	CreatedAt     time.Time
}

// Enabled reports whether an admin lets the host work: neither disabled
// nor deleted.
func (h Host) Enabled() bool { return !h.Disabled && h.DeletedAt.IsZero() }

// HostLink is the one host link that holds a host across every replica:
// a second link is admitted only once this one has ended or gone silent.
type HostLink struct {
	ID     string    // "" when no link holds the host
	Remote string    // the address the link came from
	At     time.Time // when it connected
}

// TokenKind says what a token authenticates.
type TokenKind string

const (
	TokenUser    TokenKind = "user"    // a personal key: acts as UserID, within Role and the user's own role
	TokenService TokenKind = "service" // a service key: acts as itself in OrgID, within Role; UserID made it
	TokenHost    TokenKind = "host"    // bound to HostID
	// TokenSession is a browser's sign-in: a personal credential carried
	// only in an HttpOnly cookie, ended by sign-out, an absolute expiry
	// (ExpiresAt) or IdleTimeout without use.
	TokenSession TokenKind = "session"
)

// Token is an API key or a host credential. Only the SHA-256 of the
// secret is kept.
type Token struct {
	ID     string
	Name   string
	Kind   TokenKind
	HostID HostID
	// OrgID and Role bound what a user or service key may do ("" org: a
	// fleet operator's key that reaches no organisation). UserID is the
	// personal key's owner, or the service key's maker.
	OrgID     OrgID
	UserID    UserID
	Role      Role
	Prefix    string // visible start of the secret, for listing
	Hash      string // hex SHA-256 of the whole secret
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never
	// IdleTimeout ends a token unused for that long (zero: never); the
	// last use is recorded at most once a minute.
	IdleTimeout time.Duration
	LastUsedAt  time.Time
	RevokedAt   time.Time
}

// TokenFilter narrows a list of tokens; a zero field matches all.
type TokenFilter struct {
	OrgID  OrgID
	UserID UserID
	Kind   TokenKind
}

// Expired says the token's expiry has passed at now, or it has been
// idle for its IdleTimeout.
func (t Token) Expired(now time.Time) bool {
	if !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return true
	}
	if t.IdleTimeout <= 0 {
		return false
	}
	last := t.CreatedAt
	if t.LastUsedAt.After(last) {
		last = t.LastUsedAt
	}
	return now.Sub(last) >= t.IdleTimeout
}

// Personal says the token acts as its user (a personal key or a
// browser sign-in).
func (t Token) Personal() bool { return t.Kind == TokenUser || t.Kind == TokenSession }
