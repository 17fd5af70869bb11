package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
)

func activeSession(t *testing.T, e *coordinatortest.Env) domain.Session {
	t.Helper()
	s, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{IdleTimeoutSec: -1}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.Wait(t, s.ID, domain.SessionActive)
}

func TestSuspendThenResumeOnDemand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	_, a := e.AddHost(t, "a", 4)
	s := activeSession(t, e)
	if _, _, err := e.Co.Suspend(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	s = e.Wait(t, s.ID, domain.SessionIdle)
	if s.HeadSnapshotID == "" || s.HostID != "" || a.Running(s.ID) {
		t.Fatalf("idle session %+v: want a head snapshot, no host, no machine", s)
	}
	// Any guest request resumes it; the caller just waits.
	g, err := e.Co.Guest(context.Background(), s.ID)
	if err != nil || g.Session.State != domain.SessionActive {
		t.Fatalf("Guest on an idle session: %+v %v", g.Session, err)
	}
	snaps, _ := e.St.ListSnapshots(context.Background(), s.ID)
	if len(snaps) != 1 || snaps[0].Reason != "suspend" {
		t.Fatalf("snapshots %+v", snaps)
	}
}

func TestResumePrefersTheHostCachingTheSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	e.AddHost(t, "a", 16) // most free memory
	bID, _ := e.AddHost(t, "b", 4)
	s := activeSession(t, e)
	if _, _, err := e.Co.Suspend(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	s = e.Wait(t, s.ID, domain.SessionIdle)
	capa := domain.Capacity{MemoryMiB: 1024, VCPUs: 4, CachedSnapshots: []string{string(s.HeadSnapshotID)}}
	if _, err := e.St.HostHeartbeat(context.Background(), bID, &capa, time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := e.Co.Resume(context.Background(), s.ID)
	if err != nil || s.HostID != bID {
		t.Fatalf("resumed on %q (%v), want the caching host %s", s.HostID, err, bID)
	}
}

func TestHostLostWithSnapshotGoesIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{HeartbeatInterval: 50 * time.Millisecond, HostLostAfter: 300 * time.Millisecond, MonitorInterval: 50 * time.Millisecond})
	aID, _ := e.AddHost(t, "a", 4)
	stop := e.KeepAlive(t, aID)
	s := activeSession(t, e)
	if _, err := e.Co.Snapshot(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.St.GetSession(context.Background(), s.ID); got.State != domain.SessionActive {
		t.Fatalf("snapshot stopped the session: %s", got.State)
	}
	stop()
	s = e.Wait(t, s.ID, domain.SessionIdle) // no heartbeats: the host is lost
	if !strings.Contains(s.Reason, "resumes from snapshot") {
		t.Fatalf("reason %q", s.Reason)
	}
}

func TestCorruptSnapshotEndsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	_, a := e.AddHost(t, "a", 4)
	s := activeSession(t, e)
	if _, _, err := e.Co.Suspend(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	e.Wait(t, s.ID, domain.SessionIdle)
	a.Mu.Lock()
	a.Corrupt = true
	a.Mu.Unlock()
	if _, err := e.Co.Resume(context.Background(), s.ID); err == nil {
		t.Fatal("resume of a corrupt snapshot succeeded")
	}
	s = e.Wait(t, s.ID, domain.SessionDead)
	if !strings.Contains(s.Reason, "chunk 3 hash mismatch") {
		t.Fatalf("reason %q does not say why", s.Reason)
	}
}

func TestIdleSessionsAreSuspended(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{MonitorInterval: 50 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	e.AddHost(t, "a", 4)
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	e.Wait(t, s.ID, domain.SessionActive)
	e.Wait(t, s.ID, domain.SessionIdle)
	keep, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{IdleTimeoutSec: -1}, "")
	e.Wait(t, keep.ID, domain.SessionActive)
	time.Sleep(400 * time.Millisecond) // longer than the idle timeout; the session must stay
	if got, _ := e.St.GetSession(context.Background(), keep.ID); got.State != domain.SessionActive {
		t.Fatalf("session with idle timeout 'never' is %s", got.State)
	}
}

// TestHardTimeLimitEndsSessionsDead: sessions past their time limit end
// Dead with the reason, their machine destroyed, whatever state they are
// in; one with no limit stays.
func TestHardTimeLimitEndsSessionsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{MonitorInterval: 50 * time.Millisecond, MaxLifetime: 400 * time.Millisecond})
	_, h := e.AddHost(t, "a", 4)
	ctx := context.Background()
	active := activeSession(t, e) // the server default limit
	idle := activeSession(t, e)
	if _, _, err := e.Co.Suspend(ctx, idle.ID); err != nil {
		t.Fatal(err)
	}
	keep, _ := e.Co.CreateSession(ctx, domain.SessionSpec{IdleTimeoutSec: -1, MaxLifetimeSec: -1}, "")
	e.Wait(t, keep.ID, domain.SessionActive)
	for _, id := range []domain.SessionID{active.ID, idle.ID} {
		s := e.Wait(t, id, domain.SessionDead)
		if !strings.Contains(s.Reason, "hard time limit of 400ms passed") {
			t.Errorf("session %s: reason %q does not say why", id, s.Reason)
		}
	}
	if h.Running(active.ID) {
		t.Errorf("expired session's machine still runs on its host")
	}
	if got, _ := e.St.GetSession(ctx, keep.ID); got.State != domain.SessionActive {
		t.Errorf("session without a limit is %s", got.State)
	}
	if _, err := e.Co.CreateSession(ctx, domain.SessionSpec{MaxLifetimeSec: -2}, ""); !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("max_lifetime_s -2: %v, want domain.ErrInvalid", err)
	}
}

// TestOutboxExactlyOnceAcrossSuspendAndHostLoss: items apply once, in
// order, while active, across a suspend, and across a lost host that had
// applied items after the last snapshot (they are applied again on the
// snapshot's state, which never saw them: still once in the surviving state).
func TestOutboxExactlyOnceAcrossSuspendAndHostLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{HeartbeatInterval: 50 * time.Millisecond, HostLostAfter: 400 * time.Millisecond, MonitorInterval: 50 * time.Millisecond})
	aID, _ := e.AddHost(t, "a", 4)
	stopA := e.KeepAlive(t, aID)
	ctx := context.Background()
	s := activeSession(t, e)
	put := func(id string) {
		t.Helper()
		if _, err := e.Co.PutOutbox(ctx, s.ID, id, "note", json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitState := func(id string, want domain.OutboxState) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			items, _ := e.St.ListOutbox(ctx, s.ID, 0, 100)
			for _, it := range items {
				if it.ID == id && it.State == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("item %s never %s: %+v", id, want, items)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	put("i1")
	put("i1") // same id: exactly once
	waitState("i1", domain.OutboxDelivered)
	if _, _, err := e.Co.Suspend(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	e.Wait(t, s.ID, domain.SessionIdle)
	waitState("i1", domain.OutboxDurable)
	put("i2") // resumes the idle session and delivers
	waitState("i2", domain.OutboxDelivered)
	// Host a vanishes (no heartbeats) with i2 applied but not snapshotted.
	bID, _ := e.AddHost(t, "b", 4)
	e.KeepAlive(t, bID)
	stopA()
	e.Wait(t, s.ID, domain.SessionIdle)
	if got, _ := e.St.GetSession(ctx, s.ID); got.HostID != "" {
		t.Fatalf("idle session still on %s", got.HostID)
	}
	put("i3")
	waitState("i3", domain.OutboxDelivered)
	waitState("i2", domain.OutboxDelivered)
	effects := e.Fleet.Snaps().Effects(s.ID)
	for _, id := range []string{"i1", "i2", "i3"} {
		if effects[id] != 1 {
			t.Fatalf("item %s applied %d times in the surviving state (%v); lost host %s", id, effects[id], effects, aID)
		}
	}
}
