package domain

import (
	"time"
)

// HostState is the coordinator's view of a host.
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
	LastHeartbeat   time.Time
	ConnectedAt     time.Time
	CreatedAt       time.Time
}

// TokenKind says what a token authenticates.
type TokenKind string

const (
	TokenUser TokenKind = "user"
	TokenHost TokenKind = "host" // bound to HostID
)

// Token is an API or host credential. Only the SHA-256 of the secret is kept.
type Token struct {
	ID         string
	Name       string
	Kind       TokenKind
	HostID     HostID
	Prefix     string // visible start of the secret, for listing
	Hash       string // hex SHA-256 of the whole secret
	CreatedAt  time.Time
	LastUsedAt time.Time
	RevokedAt  time.Time
}
