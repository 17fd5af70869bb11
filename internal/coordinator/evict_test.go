package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// roomEnv is a coordinator (inside a synctest bubble) with one host that
// has room for n sessions and counts what it measures.
func roomEnv(t *testing.T, cfg coordinator.Config, n int) (*coordinatortest.Env, *coordinatortest.FakeHost, *opMetrics) {
	t.Helper()
	m := &opMetrics{ops: map[string]int{}}
	e := coordinatortest.New(t, cfg, func(store.Store, *coordinatortest.Fleet) coordinator.Deps {
		return coordinator.Deps{Metrics: m}
	})
	id, h := e.AddHost(t, "a", n)
	e.KeepAlive(t, id)
	return e, h, m
}

// started creates a session and waits until it is Active.
func started(t *testing.T, e *coordinatortest.Env, spec domain.SessionSpec) domain.Session {
	t.Helper()
	s, err := e.Co.CreateSession(context.Background(), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.Wait(t, s.ID, domain.SessionActive)
}

// noneDead fails the test if any session ended Dead.
func noneDead(t *testing.T, st store.Store) {
	t.Helper()
	dead, err := st.ListSessions(context.Background(), domain.SessionFilter{States: []domain.SessionState{domain.SessionDead}})
	if err != nil || len(dead) > 0 {
		t.Fatalf("dead sessions: %+v (%v)", dead, err)
	}
}

// eventsOf lists session id's event types with their data.
func eventsOf(t *testing.T, st store.Store, id domain.SessionID) map[string]json.RawMessage {
	t.Helper()
	evs, err := st.ListEvents(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, ev := range evs {
		out[ev.Type] = ev.Data
	}
	return out
}

// TestFullHostEvictsTheLeastRecentlyUsed: on a full host, a new session
// makes the coordinator suspend the least recently used session idle past
// the floor, and is placed once its room is free; the evicted session's
// state (an outbox item its guest applied) survives and it resumes,
// evicting in turn the next least recently used one. Nothing ends Dead.
func TestFullHostEvictsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e, h, m := roomEnv(t, coordinator.Config{EvictIdleAfter: time.Minute, QueueWait: 2 * time.Minute}, 2)
		older, newer := started(t, e, domain.SessionSpec{}), started(t, e, domain.SessionSpec{})
		if _, err := e.Co.PutOutbox(ctx, older.ID, "item-1", "prompt", json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
		opsDone(t, e.Co, e.St, older.ID)
		time.Sleep(90 * time.Second)
		if err := e.St.TouchSession(ctx, newer.ID, time.Now().Add(-70*time.Second)); err != nil {
			t.Fatal(err)
		}

		third := started(t, e, domain.SessionSpec{})
		if got := e.Wait(t, older.ID, domain.SessionIdle); got.HeadSnapshotID == "" || h.Running(older.ID) {
			t.Fatalf("evicted session: %+v, running %v; want idle with a snapshot", got, h.Running(older.ID))
		}
		if s, _ := e.St.GetSession(ctx, newer.ID); s.State != domain.SessionActive {
			t.Fatalf("the more recently used session is %s, want active", s.State)
		}
		var ev struct {
			For domain.SessionID `json:"for_session_id"`
		}
		if err := json.Unmarshal(eventsOf(t, e.St, older.ID)["evicted"], &ev); err != nil || ev.For != third.ID {
			t.Fatalf("evicted event of %s names %q (%v), want %s", older.ID, ev.For, err, third.ID)
		}

		// The evicted session comes back: the other old one (idle past the
		// floor) makes room; the new one (just started) is under it.
		if _, err := e.Co.Resume(ctx, older.ID); err != nil {
			t.Fatalf("resume the evicted session: %v", err)
		}
		e.Wait(t, newer.ID, domain.SessionIdle)
		if s, _ := e.St.GetSession(ctx, third.ID); s.State != domain.SessionActive {
			t.Fatalf("the session under the floor is %s, want active", s.State)
		}
		if got := e.Fleet.Snaps().Effects(older.ID); got["item-1"] != 1 {
			t.Fatalf("after eviction and resume the guest's outbox effects are %v, want item-1 once", got)
		}
		noneDead(t, e.St)
		if got := m.String(); !strings.Contains(got, "evicted=2") || !strings.Contains(got, "queued/create=1") || !strings.Contains(got, "queued/resume=1") {
			t.Fatalf("measured %s, want 2 evictions, a queued create and a queued resume", got)
		}
	})
}

// TestNoRoomRefusesWithRetryAfter: when nothing on a full host may be
// evicted (a session that never idles, or one under the floor), a create
// waits out the queue and is refused with a RoomError, its session
// Completed, never started and never Dead; the running one is untouched.
func TestNoRoomRefusesWithRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		spec      domain.SessionSpec // of the session filling the host
		wantRetry time.Duration
	}{
		{name: "it never idles", spec: domain.SessionSpec{IdleTimeoutSec: -1}, wantRetry: 30 * time.Second},
		// The queue waits 20 s of the 60 s floor: 40 s remain.
		{name: "it is under the floor", spec: domain.SessionSpec{}, wantRetry: 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e, h, m := roomEnv(t, coordinator.Config{EvictIdleAfter: time.Minute, QueueWait: 20 * time.Second}, 1)
				busy := started(t, e, tt.spec)
				s, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
				if err != nil {
					t.Fatal(err)
				}
				got, err := e.Co.WaitStarted(context.Background(), s.ID)
				var room *domain.RoomError
				if !errors.As(err, &room) || !errors.Is(err, domain.ErrNoRoom) {
					t.Fatalf("WaitStarted = %s, %v; want a RoomError", got.State, err)
				}
				if d := room.RetryAfter; d < tt.wantRetry-2*time.Second || d > tt.wantRetry {
					t.Errorf("retry after %s, want about %s", d, tt.wantRetry)
				}
				if got.State != domain.SessionCompleted || !strings.Contains(got.Reason, "no host has room") || got.HostID != "" {
					t.Fatalf("refused session: %s %q on %q; want completed, no host has room", got.State, got.Reason, got.HostID)
				}
				if !h.Running(busy.ID) {
					t.Fatal("the session filling the host was evicted")
				}
				if _, ok := eventsOf(t, e.St, s.ID)["queued"]; !ok {
					t.Error("the refused session has no queued event")
				}
				// The idempotency key is free again: a retry is a new session.
				again, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
				if err != nil || again.ID == s.ID {
					t.Fatalf("retry with the same key: %s, %v; want a new session", again.ID, err)
				}
				if _, err := e.Co.DeleteSession(context.Background(), again.ID); err != nil {
					t.Fatal(err)
				}
				noneDead(t, e.St)
				if got := m.String(); !strings.Contains(got, "refused/create=1") || strings.Contains(got, "evicted") {
					t.Fatalf("measured %s, want one refused create and no eviction", got)
				}
			})
		})
	}
}

// TestResumeWithoutRoomStaysIdle: an Idle session that cannot be placed
// again (its host is full of sessions that never idle) stays Idle, and
// the resume is refused with a RoomError; a later resume, once there is
// room, brings it back.
func TestResumeWithoutRoomStaysIdle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e, _, _ := roomEnv(t, coordinator.Config{QueueWait: 20 * time.Second}, 1)
		sleeper := started(t, e, domain.SessionSpec{})
		if _, _, err := e.Co.Suspend(ctx, sleeper.ID); err != nil {
			t.Fatal(err)
		}
		e.Wait(t, sleeper.ID, domain.SessionIdle)
		busy := started(t, e, domain.SessionSpec{IdleTimeoutSec: -1})

		_, err := e.Co.Resume(ctx, sleeper.ID)
		if !errors.Is(err, domain.ErrNoRoom) {
			t.Fatalf("resume on a full host: %v, want ErrNoRoom", err)
		}
		if s, _ := e.St.GetSession(ctx, sleeper.ID); s.State != domain.SessionIdle {
			t.Fatalf("after a refused resume the session is %s, want idle", s.State)
		}
		if _, err := e.Co.DeleteSession(ctx, busy.ID); err != nil {
			t.Fatal(err)
		}
		e.Wait(t, busy.ID, domain.SessionCompleted)
		if _, err := e.Co.Resume(ctx, sleeper.ID); err != nil {
			t.Fatalf("resume once there is room: %v", err)
		}
		noneDead(t, e.St)
	})
}

// TestTwentySessionsOnAHostForEight: sessions created one after another
// (each used once, then left idle past the floor) on a host with room for
// 8: from the 9th on, each create evicts the least recently used; every
// session is then used again and resumes, evicting another in turn, with
// what its guest applied intact. At most 8 ever run, and none ends Dead.
func TestTwentySessionsOnAHostForEight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e, h, m := roomEnv(t, coordinator.Config{EvictIdleAfter: time.Minute, IdleTimeout: 24 * time.Hour}, 8)
		var ids []domain.SessionID
		use := func(id domain.SessionID, item string) {
			t.Helper()
			if _, err := e.Co.PutOutbox(ctx, id, item, "prompt", json.RawMessage(`{}`)); err != nil {
				t.Fatal(err)
			}
			opsDone(t, e.Co, e.St, id)
			time.Sleep(70 * time.Second) // past the floor before the next one comes
		}
		for range 20 {
			s := started(t, e, domain.SessionSpec{})
			ids = append(ids, s.ID)
			use(s.ID, "first")
			if n := running(t, e.St); n > 8 {
				t.Fatalf("%d sessions run on a host for 8", n)
			}
		}
		for _, id := range ids {
			if _, err := e.Co.Resume(ctx, id); err != nil {
				t.Fatalf("resume %s: %v", id, err)
			}
			use(id, "second")
			if !h.Running(id) {
				t.Fatalf("session %s does not run after its resume", id)
			}
		}
		for _, id := range ids {
			if got := e.Fleet.Snaps().Effects(id); got["first"] != 1 || got["second"] != 1 {
				t.Errorf("session %s: its guest applied %v, want first and second once", id, got)
			}
		}
		noneDead(t, e.St)
		// 12 creates past the 8th evict one each; then every session is
		// idle when it is used again (12 never resumed yet, 8 evicted by
		// those resumes), so all 20 resumes evict one.
		if got := m.String(); !strings.Contains(got, "evicted=32") || !strings.Contains(got, "queued/create=12") || !strings.Contains(got, "queued/resume=20") {
			t.Errorf("measured %s, want 32 evictions, 12 queued creates and 20 queued resumes", got)
		}
	})
}

// running counts the sessions that hold a machine.
func running(t *testing.T, st store.Store) int {
	t.Helper()
	ss, err := st.ListSessions(context.Background(), domain.SessionFilter{States: domain.VMStates()})
	if err != nil {
		t.Fatal(err)
	}
	return len(ss)
}

// TestHostsRefusingForCapacityQueueNotKill: a host whose own count says it
// is full (it refuses every boot for capacity) makes the create wait in the
// queue and then refuses it for room: Completed, never Dead.
func TestHostsRefusingForCapacityQueueNotKill(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e, h, _ := roomEnv(t, coordinator.Config{QueueWait: 10 * time.Second}, 4)
		h.Mu.Lock()
		h.Full = true
		h.Mu.Unlock()
		s, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Co.WaitStarted(context.Background(), s.ID)
		if !errors.Is(err, domain.ErrNoRoom) || got.State != domain.SessionCompleted || !strings.Contains(got.Reason, "no host has room: host-a: tried already (it refused)") {
			t.Fatalf("WaitStarted = %s %q, %v; want completed, refused for room", got.State, got.Reason, err)
		}
		noneDead(t, e.St)
	})
}
