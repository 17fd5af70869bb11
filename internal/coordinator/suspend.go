package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// SuspendResult is how a suspend ended.
type SuspendResult string

const (
	// SuspendedNow: the snapshot was committed and the session is idle.
	SuspendedNow SuspendResult = "suspended"
	// SuspendedThenResumed: the snapshot was committed, then a request
	// (an exec, a file, an outbox item, a resume) brought the session back.
	SuspendedThenResumed SuspendResult = "resumed_since"
	// SuspendedThenEnded: the snapshot was committed, then the session
	// went on to something else (deleted, dead).
	SuspendedThenEnded SuspendResult = "ended_since"
	// SuspendAlreadyIdle: there was nothing to do.
	SuspendAlreadyIdle SuspendResult = "already_idle"
	// SuspendFailed: the snapshot could not be taken; the session runs on.
	SuspendFailed SuspendResult = "failed"
	// SuspendSuperseded: a newer op (a delete) took the session first.
	SuspendSuperseded SuspendResult = "superseded"
)

// SuspendOutcome says what a suspend did, read once its evict op ended:
// callers report it rather than guess from the session's state, which a
// request may have changed since.
type SuspendOutcome struct {
	Result     SuspendResult
	SnapshotID domain.SnapshotID // the snapshot the suspend committed (or the idle session's head)
	Why        string            // for failed and superseded: what happened
	Op         domain.Op         // the evict op as it ended (zero when already idle)
	Session    domain.Session    // as it is now
}

// Outcome reads how the suspend whose evict op is op ended (op as WaitOp
// returned it; see AlreadyIdle for a suspend that found nothing to do).
func (c *Coordinator) Outcome(ctx context.Context, op domain.Op) (SuspendOutcome, error) {
	if op.ID == "" {
		return SuspendOutcome{}, errors.New("suspend outcome: no op")
	}
	s, err := c.st.GetSession(ctx, op.SessionID)
	if err != nil {
		return SuspendOutcome{}, err
	}
	out := SuspendOutcome{Op: op, Session: s}
	// The evict op names its snapshot: it exists only if it was committed.
	switch _, err := c.st.GetSnapshot(ctx, domain.SnapshotID(op.ID)); {
	case err == nil:
		out.SnapshotID = domain.SnapshotID(op.ID)
	case !errors.Is(err, store.ErrNotFound):
		return out, err
	}
	switch {
	case op.State == domain.OpSuperseded:
		out.Result, out.Why = SuspendSuperseded, c.supersededBy(ctx, op)
	case op.State == domain.OpFailed:
		out.Result, out.Why = SuspendFailed, op.Error
	case op.State != domain.OpSucceeded:
		return out, fmt.Errorf("suspend outcome: op %s is still %s", op.ID, op.State)
	case out.SnapshotID == "": // the evict found the session idle already
		out.Result, out.SnapshotID = SuspendAlreadyIdle, s.HeadSnapshotID
	default:
		out.Result = resultSince(s)
	}
	return out, nil
}

// resultSince is what became of a session after its suspend committed.
func resultSince(s domain.Session) SuspendResult {
	switch s.State {
	case domain.SessionIdle:
		return SuspendedNow
	case domain.SessionResuming, domain.SessionActive, domain.SessionSuspending:
		return SuspendedThenResumed
	}
	return SuspendedThenEnded
}

// supersededBy says which op took the session from op.
func (c *Coordinator) supersededBy(ctx context.Context, op domain.Op) string {
	ops, err := c.st.ListOps(ctx, op.SessionID)
	if err != nil {
		return "a newer operation took the session"
	}
	for _, o := range ops {
		if o.ID != op.ID && !o.CreatedAt.Before(op.CreatedAt) {
			return fmt.Sprintf("a %s operation (%s) took the session first", o.Kind.Word(), o.ID)
		}
	}
	return "a newer operation took the session"
}

// AlreadyIdle is the outcome of a suspend that found session s idle.
func AlreadyIdle(s domain.Session) SuspendOutcome {
	return SuspendOutcome{Result: SuspendAlreadyIdle, SnapshotID: s.HeadSnapshotID, Session: s}
}
