package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/store"
)

// TopicOps wakes the op workers of every replica (store.Notify).
const TopicOps = "ops"

// SessionTopic is the store notification topic woken on every change of a
// session (its state, its op, its events).
func SessionTopic(id domain.SessionID) string { return sessionTopicPrefix + string(id) }

const sessionTopicPrefix = "session:"

// TopicSessions is woken with every session's topic: lists of sessions
// (the API's change feed) follow it.
const TopicSessions = "sessions"

// CreateSession validates spec, records the session with its create op and
// wakes a worker. It returns at once; use WaitSession to wait for Active.
func (c *Coordinator) CreateSession(ctx context.Context, spec domain.SessionSpec, idempotencyKey string) (domain.Session, error) {
	if err := c.pin(ctx, &spec); err != nil {
		return domain.Session{}, err
	}
	if err := c.normalize(&spec); err != nil {
		return domain.Session{}, err
	}
	s, _, created, err := c.st.CreateSession(ctx, store.NewSession{
		ID: domain.SessionID(c.newID()), Spec: spec, IdempotencyKey: idempotencyKey, OpID: c.newID(), At: c.now(),
	})
	if err != nil {
		return domain.Session{}, fmt.Errorf("create session: %w", err)
	}
	if created {
		c.log.Info("session created", "session_id", s.ID)
		c.wake(ctx, TopicOps)
	}
	return s, nil
}

// pin resolves the image and the harness spec names (clearing any ids a
// caller set: only the coordinator pins them).
func (c *Coordinator) pin(ctx context.Context, spec *domain.SessionSpec) error {
	spec.ImageID, spec.BaseSnapshotID, spec.HarnessID = "", "", ""
	libc := ""
	if spec.Image != "" {
		if c.images == nil {
			return fmt.Errorf("%w: this server has no images (it has no blob store)", domain.ErrInvalid)
		}
		var err error
		if libc, err = c.images.PinImage(ctx, spec); err != nil {
			return err
		}
	}
	if spec.Harness == "" {
		return nil
	}
	if c.harns == nil {
		return fmt.Errorf("%w: this server has no harness registry (it has no blob store)", domain.ErrInvalid)
	}
	return c.harns.PinHarness(ctx, spec, libc)
}

func (c *Coordinator) normalize(spec *domain.SessionSpec) error {
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = c.cfg.DefaultMemoryMiB
	}
	if spec.VCPUs == 0 {
		spec.VCPUs = c.cfg.DefaultVCPUs
	}
	switch {
	case spec.MemoryMiB < 64 || spec.MemoryMiB > c.cfg.MaxMemoryMiB:
		return fmt.Errorf("%w: memory_mib must be between 64 and %d, got %d", domain.ErrInvalid, c.cfg.MaxMemoryMiB, spec.MemoryMiB)
	case spec.VCPUs < 1 || spec.VCPUs > c.cfg.MaxVCPUs:
		return fmt.Errorf("%w: vcpus must be between 1 and %d, got %d", domain.ErrInvalid, c.cfg.MaxVCPUs, spec.VCPUs)
	case spec.IdleTimeoutSec < -1:
		return fmt.Errorf("%w: idle_timeout_s must be -1 (never), 0 (server default) or positive, got %d", domain.ErrInvalid, spec.IdleTimeoutSec)
	case spec.MaxLifetimeSec < -1:
		return fmt.Errorf("%w: max_lifetime_s must be -1 (none), 0 (server default) or positive, got %d", domain.ErrInvalid, spec.MaxLifetimeSec)
	}
	return checkEnv(spec)
}

func checkEnv(spec *domain.SessionSpec) error {
	if len(spec.Image) > domain.MaxImageRef || strings.ContainsAny(spec.Image, "\x00\n ") {
		return fmt.Errorf("%w: image must be a reference of at most %d characters without spaces", domain.ErrInvalid, domain.MaxImageRef)
	}
	if err := domain.CheckEnv(spec.Env); err != nil {
		return err
	}
	return checkEgress(spec)
}

// maxEgress bounds a session's egress list (a profile's is bounded the
// same, and a harness names a few hosts).
const maxEgress = 256

// maxBrokered bounds a session's brokered hosts, maxBrokeredRepos the
// repositories of one (a profile has at most 32).
const (
	maxBrokered      = 16
	maxBrokeredRepos = 32
)

// checkEgress validates spec.Egress, adds each brokered host to it, then
// sorts it and drops repeats.
func checkEgress(spec *domain.SessionSpec) error {
	if len(spec.Brokered) > maxBrokered {
		return fmt.Errorf("%w: %d brokered hosts, at most %d", domain.ErrInvalid, len(spec.Brokered), maxBrokered)
	}
	for i, b := range spec.Brokered {
		name, port, err := net.SplitHostPort(b.Host)
		if err != nil || name != strings.ToLower(name) || port == "" || b.SecretID == "" || net.ParseIP(name) != nil {
			return fmt.Errorf("%w: brokered[%d]: %q: want a lower-case name:port and a secret", domain.ErrInvalid, i, b.Host)
		}
		if len(b.Access) > maxBrokeredRepos {
			return fmt.Errorf("%w: brokered[%d]: %d repositories, at most %d", domain.ErrInvalid, i, len(b.Access), maxBrokeredRepos)
		}
		for _, a := range b.Access {
			if !a.Valid() {
				return fmt.Errorf("%w: brokered[%d]: repository path %.80q: want /OWNER/NAME", domain.ErrInvalid, i, a.Path)
			}
		}
		spec.Egress = append(spec.Egress, b.Host)
	}
	if len(spec.Egress) > maxEgress {
		return fmt.Errorf("%w: egress lists %d hosts, at most %d", domain.ErrInvalid, len(spec.Egress), maxEgress)
	}
	// The check each host makes when it compiles the list at boot, so an
	// entry it would refuse (a loopback, private or metadata address) is
	// refused here, naming it, rather than failing the boot.
	for i, h := range spec.Egress {
		if err := netpolicy.CheckEntry(h); err != nil {
			return fmt.Errorf("%w: egress[%d]: %w", domain.ErrInvalid, i, err)
		}
	}
	slices.Sort(spec.Egress)
	spec.Egress = slices.Compact(spec.Egress)
	return nil
}

// DeleteSession records that the session should be deleted and supersedes
// whatever op is in flight: the destroy op claims a newer epoch, so the old
// op's remaining writes are rejected.
func (c *Coordinator) DeleteSession(ctx context.Context, id domain.SessionID) (domain.Session, error) {
	s, err := c.st.GetSession(ctx, id)
	if err != nil {
		return domain.Session{}, err
	}
	if s.State.Terminal() {
		return s, nil
	}
	if err := c.st.SetDesiredState(ctx, id, domain.DesireDeleted); err != nil {
		return domain.Session{}, fmt.Errorf("delete session %s: %w", id, err)
	}
	_, err = c.st.EnqueueOp(ctx, domain.Op{
		ID: c.newID(), SessionID: id, Kind: domain.OpDestroy, IdempotencyKey: "destroy", CreatedAt: c.now(),
	}, true)
	if err != nil {
		return domain.Session{}, fmt.Errorf("delete session %s: %w", id, err)
	}
	c.log.Info("session delete requested", "session_id", id)
	c.wake(ctx, TopicOps)
	return c.st.GetSession(ctx, id)
}

// WaitSession blocks until done(session) holds or ctx ends, and returns the
// last session read.
func (c *Coordinator) WaitSession(ctx context.Context, id domain.SessionID, done func(domain.Session) bool) (domain.Session, error) {
	sub := c.st.Subscribe(ctx, SessionTopic(id))
	poll := time.NewTicker(time.Second) // a missed wakeup costs at most this
	defer poll.Stop()
	for {
		s, err := c.st.GetSession(ctx, id)
		if err != nil {
			return s, fmt.Errorf("wait for the session: %w", err) // err names it
		}
		if done(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("wait for session %s (state %s): %w", id, s.State, ctx.Err())
		case <-sub:
		case <-poll.C:
		}
	}
}

// Settled reports whether a session has left the transitional states an
// API caller would wait through.
func Settled(s domain.Session) bool {
	switch s.State {
	case domain.SessionActive, domain.SessionIdle, domain.SessionCompleted, domain.SessionDead:
		return true
	}
	return false
}

// WaitStarted waits until a new session has settled (Settled). A create
// refused for lack of room (the session ended Completed without starting)
// returns the session with a *domain.RoomError saying when to retry.
func (c *Coordinator) WaitStarted(ctx context.Context, id domain.SessionID) (domain.Session, error) {
	s, err := c.WaitSession(ctx, id, Settled)
	if err != nil || s.State != domain.SessionCompleted {
		return s, err
	}
	ops, err := c.st.ListOps(ctx, id)
	if err != nil {
		return s, err
	}
	for _, o := range ops {
		if o.Kind != domain.OpCreate || o.Step != stepNoRoom {
			continue
		}
		// The op ends the session before it records its own end.
		if o, _, err = c.WaitOp(ctx, o); err != nil {
			return s, err
		}
		if room := refusedForRoom(o); room != nil {
			return s, fmt.Errorf("session %s not started: %w", id, room)
		}
	}
	return s, nil
}

// refusedForRoom is the refusal of op o if it failed for lack of room.
func refusedForRoom(o domain.Op) *domain.RoomError {
	if o.State != domain.OpFailed || o.Step != stepNoRoom {
		return nil
	}
	if room, ok := domain.RoomRefusal(o.Error); ok {
		return room
	}
	return &domain.RoomError{Why: o.Error, RetryAfter: defaultRetryAfter}
}

// EnsureActive resumes s if it is Idle and waits until it is Active. It
// fails at once for terminal sessions, and when the resume it requested
// failed (with that op's error).
func (c *Coordinator) EnsureActive(ctx context.Context, s domain.Session) (domain.Session, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ResumeWait)
	defer cancel()
	var resumeOp string
	for {
		switch {
		case s.State == domain.SessionActive:
			return s, nil
		case s.State.Terminal() || s.State == domain.SessionDeleting || s.State == domain.SessionHostLost && s.HeadSnapshotID == "":
			return s, fmt.Errorf("%w: session %s is %s", domain.ErrNotActive, s.ID, s.State)
		case s.State == domain.SessionIdle:
			if resumeOp != "" {
				if o, err := c.st.GetOp(ctx, resumeOp); err == nil && o.State == domain.OpFailed {
					if room := refusedForRoom(o); room != nil {
						return s, fmt.Errorf("session %s not resumed: %w", s.ID, room)
					}
					return s, fmt.Errorf("%w: session %s could not be resumed: %s", domain.ErrNotActive, s.ID, o.Error)
				}
			}
			if op, ok := c.requestResume(ctx, s.ID); ok {
				resumeOp = op.ID
			}
		}
		if err := c.waitChange(ctx, s.ID); err != nil {
			return s, fmt.Errorf("%w: waiting for session %s to become active (it is %s): %w", domain.ErrNotActive, s.ID, s.State, err)
		}
		next, err := c.st.GetSession(ctx, s.ID)
		if err != nil {
			return s, err
		}
		s = next
	}
}

// waitChange waits for a wakeup on the session's topic, or a poll tick.
func (c *Coordinator) waitChange(ctx context.Context, id domain.SessionID) error {
	sub := c.st.Subscribe(ctx, SessionTopic(id))
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-sub:
	case <-t.C:
	}
	return nil
}

// enqueueWhenFree enqueues op, waiting (bounded) for an op already in
// flight for the session to finish first.
func (c *Coordinator) enqueueWhenFree(ctx context.Context, op domain.Op) (domain.Op, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		o, err := c.st.EnqueueOp(ctx, op, false)
		if !errors.Is(err, store.ErrOpInProgress) {
			if err == nil {
				c.wake(ctx, TopicOps)
			}
			return o, err
		}
		if werr := c.waitChange(ctx, op.SessionID); werr != nil {
			return o, conflictIfBusy(err)
		}
	}
}

// Suspend snapshots the session and frees its host, returning at once with
// the evict op (zero if the session was already Idle); the session reaches
// Idle when the snapshot is committed. WaitOp waits for the op.
func (c *Coordinator) Suspend(ctx context.Context, id domain.SessionID) (domain.Session, domain.Op, error) {
	s, err := c.st.GetSession(ctx, id)
	if err != nil {
		return s, domain.Op{}, err
	}
	if s.State == domain.SessionIdle {
		return s, domain.Op{}, nil
	}
	if s.State != domain.SessionActive {
		return s, domain.Op{}, fmt.Errorf("%w: session %s is %s; only an active session can be suspended", domain.ErrNotActive, id, s.State)
	}
	if err := c.st.SetDesiredState(ctx, id, domain.DesireIdle); err != nil {
		return s, domain.Op{}, fmt.Errorf("suspend session %s: %w", id, err)
	}
	op, err := c.enqueueWhenFree(ctx, domain.Op{ID: c.newID(), SessionID: id, Kind: domain.OpEvict, CreatedAt: c.now()})
	if err != nil {
		return s, op, fmt.Errorf("suspend session %s: %w", id, err)
	}
	return s, op, nil
}

// WaitOp waits until op is no longer pending or running and returns it
// with the session as it is then.
func (c *Coordinator) WaitOp(ctx context.Context, op domain.Op) (domain.Op, domain.Session, error) {
	var done domain.Op
	s, err := c.WaitSession(ctx, op.SessionID, func(domain.Session) bool {
		o, err := c.st.GetOp(ctx, op.ID)
		done = o
		return err == nil && o.State != domain.OpPending && o.State != domain.OpRunning
	})
	if err != nil {
		return done, s, err
	}
	// The session was read before the op's end was seen: read it again.
	s, err = c.st.GetSession(ctx, op.SessionID)
	return done, s, err
}

// Resume brings an Idle session back and waits for Active.
func (c *Coordinator) Resume(ctx context.Context, id domain.SessionID) (domain.Session, error) {
	s, err := c.st.GetSession(ctx, id)
	if err != nil {
		return s, err
	}
	if err := c.st.SetDesiredState(ctx, id, domain.DesireActive); err != nil {
		return s, fmt.Errorf("resume session %s: %w", id, err)
	}
	return c.EnsureActive(ctx, s)
}

// Snapshot captures a running session without stopping it and returns the
// committed snapshot.
func (c *Coordinator) Snapshot(ctx context.Context, id domain.SessionID) (domain.Snapshot, error) {
	s, err := c.st.GetSession(ctx, id)
	if err != nil {
		return domain.Snapshot{}, err
	}
	if s.State != domain.SessionActive {
		return domain.Snapshot{}, fmt.Errorf("%w: session %s is %s", domain.ErrNotActive, id, s.State)
	}
	op, err := c.enqueueWhenFree(ctx, domain.Op{ID: c.newID(), SessionID: id, Kind: domain.OpSnapshot, CreatedAt: c.now()})
	if err != nil {
		return domain.Snapshot{}, fmt.Errorf("snapshot session %s: %w", id, err)
	}
	done, _, err := c.WaitOp(ctx, op)
	if err != nil {
		return domain.Snapshot{}, err
	}
	if done.State != domain.OpSucceeded {
		return domain.Snapshot{}, fmt.Errorf("snapshot session %s: %s", id, done.Error)
	}
	s, err = c.st.GetSession(ctx, id)
	if err != nil {
		return domain.Snapshot{}, err
	}
	return c.st.GetSnapshot(ctx, s.HeadSnapshotID)
}

func conflictIfBusy(err error) error {
	if errors.Is(err, store.ErrOpInProgress) {
		return fmt.Errorf("%w: try again when it finishes", domain.ErrBusy)
	}
	return err
}

func (c *Coordinator) wake(ctx context.Context, topic string) {
	if err := c.st.Notify(ctx, topic); err != nil {
		c.log.Warn("notify failed; waiters fall back to polling", "topic", topic, "err", err)
	}
	if strings.HasPrefix(topic, sessionTopicPrefix) {
		if err := c.st.Notify(ctx, TopicSessions); err != nil {
			c.log.Warn("notify failed; waiters fall back to polling", "topic", TopicSessions, "err", err)
		}
	}
}
