package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// fakeDev is a coordinator and store of sessions for devStop: Suspend
// commits a snapshot at once unless hang is set, in which case the evict
// op never finishes.
type fakeDev struct {
	mu       sync.Mutex
	sessions map[domain.SessionID]domain.Session
	hang     bool
	suspends int
}

func newFakeDev(states map[domain.SessionID]domain.SessionState) *fakeDev {
	f := &fakeDev{sessions: map[domain.SessionID]domain.Session{}}
	for id, st := range states {
		f.sessions[id] = domain.Session{ID: id, State: st}
	}
	return f
}

func (f *fakeDev) ListSessions(_ context.Context, flt domain.SessionFilter) ([]domain.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []domain.Session
	for _, s := range f.sessions {
		for _, st := range flt.States {
			if s.State == st {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func (f *fakeDev) GetSession(_ context.Context, id domain.SessionID) (domain.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id], nil
}

func (f *fakeDev) GetSnapshot(_ context.Context, id domain.SnapshotID) (domain.Snapshot, error) {
	return domain.Snapshot{ID: id, Uploaded: 12 << 20}, nil
}

// WaitSession: starting sessions settle Active at once.
func (f *fakeDev) WaitSession(_ context.Context, id domain.SessionID, _ func(domain.Session) bool) (domain.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s.State == domain.SessionStarting {
		s.State = domain.SessionActive
		f.sessions[id] = s
	}
	return s, nil
}

func (f *fakeDev) Suspend(_ context.Context, id domain.SessionID) (domain.Session, domain.Op, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.suspends++
	s := f.sessions[id]
	s.State = domain.SessionSuspending
	f.sessions[id] = s
	return s, domain.Op{ID: "evict-" + string(id), SessionID: id, Kind: domain.OpEvict}, nil
}

func (f *fakeDev) WaitOp(ctx context.Context, op domain.Op) (domain.Op, domain.Session, error) {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		s, _ := f.GetSession(ctx, op.SessionID)
		return op, s, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[op.SessionID]
	s.State, s.HeadSnapshotID = domain.SessionIdle, domain.SnapshotID(op.ID)
	f.sessions[op.SessionID] = s
	op.State = domain.OpSucceeded
	return op, s, nil
}

func TestDevStop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		states  map[domain.SessionID]domain.SessionState
		hang    bool
		signal  bool // a second signal while suspending
		wantOut []string
		wantErr string // "" = none
	}{
		{"nothing running", map[domain.SessionID]domain.SessionState{"s-idle": domain.SessionIdle}, false, false,
			nil, ""},
		{"all suspended", map[domain.SessionID]domain.SessionState{"s-a": domain.SessionActive, "s-b": domain.SessionStarting, "s-idle": domain.SessionIdle}, false, false,
			[]string{"suspending 2 sessions…", "1/2 s-", "2/2 s-", "s-a idle (snapshot 12.0 MiB uploaded)", "s-b idle (snapshot 12.0 MiB uploaded)"}, ""},
		{"second signal", map[domain.SessionID]domain.SessionState{"s-a": domain.SessionActive}, true, true,
			[]string{"suspending 1 session…", "stopped at once; left:", "s-a suspending (partially suspended"}, "stopped with 1 session not suspended: s-a"},
		{"timeout", map[domain.SessionID]domain.SessionState{"s-a": domain.SessionActive}, true, false,
			[]string{"gave up after 2m0s; left:", "s-a suspending"}, "stopped with 1 session not suspended: s-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeDev(tc.states)
				f.hang = tc.hang
				var out bytes.Buffer
				d := &devStop{co: f, reads: f, out: &out, timeout: 2 * time.Minute}
				abort := make(chan os.Signal, 1)
				if tc.signal {
					go func() {
						synctest.Wait() // every suspend is waiting on its op
						abort <- syscall.SIGINT
					}()
				}
				err := d.run(t.Context(), abort)
				if (tc.wantErr == "") != (err == nil) || err != nil && err.Error() != tc.wantErr {
					t.Fatalf("run = %v, want %q", err, tc.wantErr)
				}
				for _, w := range tc.wantOut {
					if !strings.Contains(out.String(), w) {
						t.Errorf("output lacks %q:\n%s", w, out.String())
					}
				}
				if len(tc.wantOut) == 0 && out.Len() > 0 {
					t.Errorf("output with nothing to suspend:\n%s", out.String())
				}
			})
		})
	}
}

// TestDevStopWatch: the first signal starts the suspends; without one,
// watch just ends with its context.
func TestDevStopWatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newFakeDev(map[domain.SessionID]domain.SessionState{"s-a": domain.SessionActive})
		d := &devStop{co: f, reads: f, out: &bytes.Buffer{}, timeout: time.Minute}
		sigs := make(chan os.Signal, 2)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := d.watch(sigs)(ctx); err != nil || f.suspends != 0 {
			t.Fatalf("watch without a signal = %v, %d suspends", err, f.suspends)
		}
		sigs <- syscall.SIGTERM
		if err := d.watch(sigs)(t.Context()); err != nil || f.suspends != 1 {
			t.Fatalf("watch after a signal = %v, %d suspends", err, f.suspends)
		}
		if s, _ := f.GetSession(t.Context(), "s-a"); s.State != domain.SessionIdle {
			t.Fatalf("session is %s", s.State)
		}
	})
}
