package coordinator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
)

// stalledSuspend suspends s while its host is held, so the evict op waits
// in Suspending; during returns it there, release lets the host go on.
func stalledSuspend(t *testing.T, e *coordinatortest.Env, h *coordinatortest.FakeHost, s domain.Session, during func()) domain.Op {
	t.Helper()
	h.Mu.Lock()
	_, op, err := e.Co.Suspend(context.Background(), s.ID)
	if err != nil {
		h.Mu.Unlock()
		t.Fatal(err)
	}
	e.Wait(t, s.ID, domain.SessionSuspending)
	during()
	h.Mu.Unlock()
	return op
}

// plainSuspend suspends s.
func plainSuspend(t *testing.T, e *coordinatortest.Env, _ *coordinatortest.FakeHost, s domain.Session) domain.Op {
	_, op, err := e.Co.Suspend(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// suspendRacedByExec suspends s while, as `session exec` does, a request
// reaches its guest (resuming it once the snapshot committed).
func suspendRacedByExec(t *testing.T, e *coordinatortest.Env, h *coordinatortest.FakeHost, s domain.Session) domain.Op {
	resumed := make(chan error, 1)
	op := stalledSuspend(t, e, h, s, func() {
		go func() {
			_, err := e.Co.Guest(context.Background(), s.ID)
			resumed <- err
		}()
	})
	if err := <-resumed; err != nil {
		t.Fatalf("the exec's resume: %v", err)
	}
	return op
}

// suspendSuperseded suspends s and deletes it while the snapshot is taken.
func suspendSuperseded(t *testing.T, e *coordinatortest.Env, h *coordinatortest.FakeHost, s domain.Session) domain.Op {
	op := stalledSuspend(t, e, h, s, func() {
		if _, err := e.Co.DeleteSession(context.Background(), s.ID); err != nil {
			t.Fatal(err)
		}
	})
	e.Wait(t, s.ID, domain.SessionCompleted)
	return op
}

// TestSuspendOutcome: how a suspend ended is read from its op and the
// snapshot it named, not guessed from the session's state, which a
// request may have changed since.
func TestSuspendOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run suspends s (its host h) and returns the evict op, or none.
		run        func(t *testing.T, e *coordinatortest.Env, h *coordinatortest.FakeHost, s domain.Session) domain.Op
		want       coordinator.SuspendResult
		snapshot   bool   // the outcome names the evict's committed snapshot
		state      string // the session's state in the outcome
		desired    domain.DesiredState
		whyContain string
	}{
		{name: "suspended", want: coordinator.SuspendedNow, snapshot: true, state: "idle", desired: domain.DesireIdle, run: plainSuspend},
		{name: "an exec resumed it once the snapshot committed", want: coordinator.SuspendedThenResumed, snapshot: true,
			state: "active", desired: domain.DesireActive, run: suspendRacedByExec},
		{name: "the snapshot failed", want: coordinator.SuspendFailed, state: "active", desired: domain.DesireIdle, whyContain: "disk full",
			run: func(t *testing.T, e *coordinatortest.Env, h *coordinatortest.FakeHost, s domain.Session) domain.Op {
				h.Mu.Lock()
				h.FailSnapshot = "disk full"
				h.Mu.Unlock()
				return plainSuspend(t, e, h, s)
			}},
		{name: "a delete superseded it", want: coordinator.SuspendSuperseded, state: "completed", desired: domain.DesireDeleted,
			whyContain: "destroy", run: suspendSuperseded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, coordinator.Config{})
			_, h := e.AddHost(t, "a", 4)
			s := activeSession(t, e)
			op := tt.run(t, e, h, s)
			done, _, err := e.Co.WaitOp(context.Background(), op)
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.Co.Outcome(context.Background(), done)
			if err != nil {
				t.Fatal(err)
			}
			if out.Result != tt.want || string(out.Session.State) != tt.state || out.Session.DesiredState != tt.desired {
				t.Errorf("outcome %s, session %s (desired %s); want %s, %s (desired %s)", out.Result, out.Session.State,
					out.Session.DesiredState, tt.want, tt.state, tt.desired)
			}
			if tt.snapshot && (out.SnapshotID != domain.SnapshotID(op.ID) || out.SnapshotID == "") {
				t.Errorf("snapshot %q, want the evict's %q", out.SnapshotID, op.ID)
			}
			if !tt.snapshot && out.SnapshotID != "" {
				t.Errorf("snapshot %q, but none was committed", out.SnapshotID)
			}
			if !strings.Contains(out.Why, tt.whyContain) {
				t.Errorf("why %q lacks %q", out.Why, tt.whyContain)
			}
		})
	}
}

// TestResumeWantsActive: after an explicit suspend (desired idle), every
// way a session comes back — an exec or a file (Guest), an outbox item,
// session resume — leaves it desired active.
func TestResumeWantsActive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		resume func(ctx context.Context, co *coordinator.Coordinator, id domain.SessionID) error
	}{
		{"guest request", func(ctx context.Context, co *coordinator.Coordinator, id domain.SessionID) error {
			_, err := co.Guest(ctx, id)
			return err
		}},
		{"outbox item", func(ctx context.Context, co *coordinator.Coordinator, id domain.SessionID) error {
			_, err := co.PutOutbox(ctx, id, "item-1", "note", json.RawMessage(`{}`))
			return err
		}},
		{"session resume", func(ctx context.Context, co *coordinator.Coordinator, id domain.SessionID) error {
			_, err := co.Resume(ctx, id)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t, coordinator.Config{})
			e.AddHost(t, "a", 4)
			s := activeSession(t, e)
			if _, _, err := e.Co.Suspend(ctx, s.ID); err != nil {
				t.Fatal(err)
			}
			if s = e.Wait(t, s.ID, domain.SessionIdle); s.DesiredState != domain.DesireIdle {
				t.Fatalf("suspended session desired %s, want idle", s.DesiredState)
			}
			if err := tt.resume(ctx, e.Co, s.ID); err != nil {
				t.Fatal(err)
			}
			s = e.Wait(t, s.ID, domain.SessionActive)
			if s.DesiredState != domain.DesireActive {
				t.Errorf("resumed session is %s (desired: %s), want desired active", s.State, s.DesiredState)
			}
		})
	}
}
