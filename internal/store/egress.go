package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// MaxEgressPage is the most egress events one ListEgressEvents returns.
const MaxEgressPage = 1000

// EgressAppend is a batch of a session's egress events to append.
type EgressAppend struct {
	SessionID domain.SessionID
	// Epoch > 0 fences the append to the session's epoch.
	Epoch int64
	// Events are appended in order with the session's next seqs; their
	// SessionID, Seq and CreatedAt are ignored.
	Events []domain.EgressEvent
	// Keep > 0 keeps only the session's newest Keep events: older ones
	// are deleted in the same transaction.
	Keep int
	At   time.Time // CreatedAt of the rows
}

// EgressQuery is one page of a session's egress log.
type EgressQuery struct {
	SessionID domain.SessionID
	// Ascending reads events with seq > After, oldest first (following
	// the log); otherwise events with seq < Before (0: from the newest),
	// newest first.
	Ascending bool
	After     int64
	Before    int64
	// Limit is the page's size: 1 to MaxEgressPage; 0 or more than
	// MaxEgressPage means MaxEgressPage.
	Limit int
}

// Egress keeps each session's egress log, bounded per session.
type Egress interface {
	// AppendEgressEvents appends a batch in one transaction and returns
	// the seq of its last event (the session's newest when the batch is
	// empty). ErrStaleEpoch if fenced and the session's epoch differs,
	// ErrNotFound for an unknown session; nothing is written then.
	AppendEgressEvents(ctx context.Context, a EgressAppend) (int64, error)
	// ListEgressEvents returns one page of a session's egress log (an
	// unknown session has none).
	ListEgressEvents(ctx context.Context, q EgressQuery) ([]domain.EgressEvent, error)
}
