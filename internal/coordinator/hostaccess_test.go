package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// fakeLinks is this replica's link server as a test sets it.
type fakeLinks struct {
	mu     sync.Mutex
	held   []hostlink.LinkInfo
	live   bool  // LinkHeld's answer
	err    error // LinkHeld's error
	asked  int
	listed int      // Links calls: one per pass of the link guard
	closed []string // "host/link"
}

func (f *fakeLinks) Links() []hostlink.LinkInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed++
	return append([]hostlink.LinkInfo(nil), f.held...)
}

func (f *fakeLinks) passes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listed
}

func (f *fakeLinks) CloseLink(hostID domain.HostID, linkID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, l := range f.held {
		if l.HostID == hostID && (linkID == "" || l.ID == linkID) {
			f.held = append(f.held[:i], f.held[i+1:]...)
			f.closed = append(f.closed, string(hostID)+"/"+l.ID)
			return true
		}
	}
	return false
}

func (f *fakeLinks) LinkHeld(context.Context, domain.HostID, string, string, string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.live, f.err
}

// set changes f under its lock (the link guard reads it meanwhile).
func (f *fakeLinks) set(change func(f *fakeLinks)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func (f *fakeLinks) closes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.closed...)
}

// linkEnv is a coordinator whose replica holds links as fakeLinks says.
func linkEnv(t *testing.T, cfg coordinator.Config) (*coordinatortest.Env, *fakeLinks) {
	t.Helper()
	links := &fakeLinks{}
	e := coordinatortest.New(t, cfg, func(store.Store, *coordinatortest.Fleet) coordinator.Deps {
		return coordinator.Deps{Links: links}
	})
	return e, links
}

// claim lets link id hold host at (a heartbeat at the same time).
func claim(t *testing.T, st store.Store, host domain.HostID, id string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.ClaimHostLink(ctx, store.LinkClaim{HostID: host, Link: domain.HostLink{ID: id, Remote: "10.9.8.7:65000", At: at},
		ReplicaID: "r9", ReplicaAddr: "http://r9", StaleBefore: time.Now().Add(time.Hour)}); err != nil { // takes over any holder
		t.Fatal(err)
	}
	if _, err := st.HostHeartbeat(ctx, host, nil, at); err != nil {
		t.Fatal(err)
	}
}

func TestAdmitLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, host domain.HostID)
		code    string // "" admitted
		asked   int    // LinkHeld calls
	}{
		{"no link holds it", func(*testing.T, *coordinatortest.Env, *fakeLinks, domain.HostID) {}, "", 0},
		{"a live link holds it", func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, h domain.HostID) {
			claim(t, e.St, h, "L1", time.Now())
			f.set(func(f *fakeLinks) { f.live = true })
		}, hostlink.CodeAlreadyConnected, 1},
		{"the holder's replica cannot be asked", func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, h domain.HostID) {
			claim(t, e.St, h, "L1", time.Now())
			f.set(func(f *fakeLinks) { f.err = errors.New("connection timed out") })
		}, hostlink.CodeAlreadyConnected, 1},
		{"the holder is gone", func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, h domain.HostID) {
			claim(t, e.St, h, "L1", time.Now())
		}, "", 1},
		{"the holder's replica restarted at this replica's address", func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, h domain.HostID) {
			if _, err := e.St.ClaimHostLink(context.Background(), store.LinkClaim{HostID: h, Link: domain.HostLink{ID: "L1", Remote: "10.9.8.7:65000", At: time.Now()},
				ReplicaID: "r0", ReplicaAddr: "http://me:8080", StaleBefore: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			f.set(func(f *fakeLinks) { f.live = true })
		}, "", 0},
		{"the holder is silent for longer than the lease", func(t *testing.T, e *coordinatortest.Env, f *fakeLinks, h domain.HostID) {
			claim(t, e.St, h, "L1", time.Now().Add(-time.Minute))
			f.set(func(f *fakeLinks) { f.live = true })
		}, "", 0},
		{"disabled", func(t *testing.T, e *coordinatortest.Env, _ *fakeLinks, h domain.HostID) {
			if _, err := e.Co.Access().DisableHost(context.Background(), h, true); err != nil {
				t.Fatal(err)
			}
		}, hostlink.CodeHostDisabled, 0},
		{"deleted", func(t *testing.T, e *coordinatortest.Env, _ *fakeLinks, h domain.HostID) {
			if _, err := e.Co.Access().DeleteHost(context.Background(), h); err != nil {
				t.Fatal(err)
			}
		}, hostlink.CodeHostDeleted, 0},
		{"token revoked", func(t *testing.T, e *coordinatortest.Env, _ *fakeLinks, _ domain.HostID) {
			if err := e.Co.Access().RevokeToken(context.Background(), "tok-a"); err != nil {
				t.Fatal(err)
			}
		}, hostlink.CodeUnauthorized, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, f := linkEnv(t, coordinator.Config{HostLostAfter: 15 * time.Second, ReplicaAddr: "http://me:8080"})
			host, _ := e.AddHost(t, "a", 2)
			tt.prepare(t, e, f, host)
			err := e.Co.Access().AdmitLink(context.Background(), hostlink.LinkInfo{ID: "L2", HostID: host, TokenID: "tok-a", Remote: "10.1.1.1:1", Since: time.Now()})
			h, _ := e.St.GetHost(context.Background(), host)
			var ref *hostlink.Refusal
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.code == "" && (h.Link.ID != "L2" || h.ReplicaID != "r1"):
				t.Fatalf("admitted, but the host row says %+v (replica %s)", h.Link, h.ReplicaID)
			case tt.code != "" && (!errors.As(err, &ref) || ref.Code != tt.code):
				t.Fatalf("got %v, want a refusal %s", err, tt.code)
			case tt.code == hostlink.CodeAlreadyConnected && (!strings.Contains(ref.Msg, "host a is already connected from 10.9.8.7:65000") ||
				ref.RetryAfter <= 0 || ref.RetryAfter > 10*time.Second || h.Link.ID != "L1"):
				t.Fatalf("refusal %+v, holder %s; want it to name the live link and when to retry (within the lease)", ref, h.Link.ID)
			}
			var asked int
			f.set(func(f *fakeLinks) { asked = f.asked })
			if asked != tt.asked {
				t.Errorf("asked whether the holder is live %d times, want %d", asked, tt.asked)
			}
		})
	}
}

// beat sends a heartbeat over link l as the host link server would.
func beat(e *coordinatortest.Env, l hostlink.LinkInfo) (int, hostlink.ErrorBody) {
	body, _ := json.Marshal(hostlink.HeartbeatRequest{})
	req := httptest.NewRequest(http.MethodPost, hostlink.PathHeartbeat, strings.NewReader(string(body)))
	rec := httptest.NewRecorder()
	e.HostLink().ServeHTTP(rec, req.WithContext(hostlink.WithLink(req.Context(), l)))
	var eb hostlink.ErrorBody
	_ = json.Unmarshal(rec.Body.Bytes(), &eb)
	return rec.Code, eb
}

// TestHeartbeatRechecksLink: every heartbeat re-checks the link's token,
// its host and its hold; a refused one is answered with a hostlink code,
// closes the link and does not bring a lost host back.
func TestHeartbeatRechecksLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		revoke func(t *testing.T, e *coordinatortest.Env, host domain.HostID)
		status int
		code   string
	}{
		{"allowed", func(*testing.T, *coordinatortest.Env, domain.HostID) {}, http.StatusOK, ""},
		{"token revoked (in the store only)", func(t *testing.T, e *coordinatortest.Env, _ domain.HostID) {
			if err := e.St.RevokeToken(context.Background(), "tok-a", time.Now()); err != nil {
				t.Fatal(err)
			}
		}, http.StatusUnauthorized, hostlink.CodeUnauthorized},
		{"host disabled", func(t *testing.T, e *coordinatortest.Env, host domain.HostID) {
			if _, err := e.St.DisableHost(context.Background(), host, true); err != nil {
				t.Fatal(err)
			}
		}, http.StatusForbidden, hostlink.CodeHostDisabled},
		{"host deleted", func(t *testing.T, e *coordinatortest.Env, host domain.HostID) {
			if _, err := e.St.DeleteHost(context.Background(), host, time.Now()); err != nil {
				t.Fatal(err)
			}
		}, http.StatusForbidden, hostlink.CodeHostDeleted},
		{"another link took over", func(t *testing.T, e *coordinatortest.Env, host domain.HostID) {
			claim(t, e.St, host, "L2", time.Now())
		}, http.StatusConflict, hostlink.CodeSuperseded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, f := linkEnv(t, coordinator.Config{LinkRecheck: time.Hour}) // only the heartbeat closes the link
			host, _ := e.AddHost(t, "a", 2)
			l := hostlink.LinkInfo{ID: "L1", HostID: host, TokenID: "tok-a"}
			claim(t, e.St, host, l.ID, time.Now())
			f.set(func(f *fakeLinks) { f.held = []hostlink.LinkInfo{l} })
			if err := e.St.SetHostState(context.Background(), host, domain.HostLost); err != nil {
				t.Fatal(err)
			}
			tt.revoke(t, e, host)
			status, eb := beat(e, l)
			h, _ := e.St.GetHost(context.Background(), host)
			if status != tt.status || eb.Code != tt.code {
				t.Fatalf("heartbeat: %d %+v, want %d %q", status, eb, tt.status, tt.code)
			}
			if tt.code == "" {
				if h.State != domain.HostReady || len(f.closes()) != 0 {
					t.Fatalf("allowed heartbeat: host %s, closed %v", h.State, f.closes())
				}
				return
			}
			if h.State != domain.HostLost {
				t.Errorf("a refused heartbeat moved the lost host to %s", h.State)
			}
			if got := f.closes(); len(got) != 1 || got[0] != string(host)+"/L1" {
				t.Errorf("closed %v, want the link the heartbeat came over", got)
			}
		})
	}
}

// TestRevokedHostLosesLinkAndSessions: revoking a host's token, disabling
// or deleting the host closes the link this replica holds, re-checks the
// others on TopicHosts, places nothing on it, and moves its sessions
// through HostLost at once (Dead here: no snapshot) — long before
// HostLostAfter.
func TestRevokedHostLosesLinkAndSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		revoke func(ctx context.Context, co *coordinator.Coordinator, host domain.HostID) error
	}{
		{"token revoked", func(ctx context.Context, co *coordinator.Coordinator, _ domain.HostID) error {
			return co.Access().RevokeToken(ctx, "tok-a")
		}},
		{"host disabled", func(ctx context.Context, co *coordinator.Coordinator, h domain.HostID) error {
			_, err := co.Access().DisableHost(ctx, h, true)
			return err
		}},
		{"host deleted", func(ctx context.Context, co *coordinator.Coordinator, h domain.HostID) error {
			_, err := co.Access().DeleteHost(ctx, h)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, f := linkEnv(t, coordinator.Config{HostLostAfter: time.Hour, PlacementWait: 300 * time.Millisecond})
			host, fh := e.AddHost(t, "a", 4)
			e.KeepAlive(t, host)
			s := activeSession(t, e)
			f.set(func(f *fakeLinks) { f.held = []hostlink.LinkInfo{{ID: "L1", HostID: host, TokenID: "tok-a"}} })
			if err := tt.revoke(ctx, e.Co, host); err != nil {
				t.Fatal(err)
			}
			if got := f.closes(); len(got) != 1 || got[0] != string(host)+"/L1" {
				t.Fatalf("closed %v, want host a's link", got)
			}
			dead := e.Wait(t, s.ID, domain.SessionDead)
			if dead.Reason == "" {
				t.Errorf("dead without a reason")
			}
			evs, _ := e.St.ListEvents(ctx, s.ID, 0, 0)
			if !hasState(evs, "host_lost") {
				t.Errorf("the session never went through host_lost: %s", states(evs))
			}
			if fh.Running(s.ID) {
				t.Log("the fake host still runs the machine: the coordinator cannot reach a host without a link")
			}
			n, err := e.Co.CreateSession(ctx, domain.SessionSpec{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Wait(t, n.ID, domain.SessionDead); got.HostID != "" {
				t.Fatalf("a new session was placed on the revoked host: %+v", got)
			}
		})
	}
}

// TestRegisterOnlyFromTheHoldingLink: a registration that reports no
// machines hands the host's sessions to recovery, so it is taken only from
// the link holding the host: one from a link that lost its hold (a second
// agent that got in while the first was silent, then lost to it) is
// refused and leaves the live session alone.
func TestRegisterOnlyFromTheHoldingLink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _ := linkEnv(t, coordinator.Config{})
	host, _ := e.AddHost(t, "a", 2)
	e.KeepAlive(t, host)
	s := activeSession(t, e)
	claim(t, e.St, host, "L1", time.Now())
	register := func(link string) int {
		body, _ := json.Marshal(hostlink.RegisterRequest{Name: "a"})
		req := httptest.NewRequest(http.MethodPost, hostlink.PathRegister, strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		e.HostLink().ServeHTTP(rec, req.WithContext(hostlink.WithLink(req.Context(), hostlink.LinkInfo{ID: link, HostID: host, TokenID: "tok-a"})))
		return rec.Code
	}
	if code := register("L0"); code != http.StatusConflict {
		t.Fatalf("register from a link without the hold: %d, want 409", code)
	}
	ops, _ := e.St.ListOps(ctx, s.ID)
	if got, _ := e.St.GetSession(ctx, s.ID); got.State != domain.SessionActive || ops[len(ops)-1].Kind == domain.OpRecover {
		t.Fatalf("after the refused registration: %s, last op %s", got.State, ops[len(ops)-1].Kind)
	}
	// The holder's own registration without the machine does recover it.
	if code := register("L1"); code != http.StatusOK {
		t.Fatalf("register from the holder: %d", code)
	}
	ops, _ = e.St.ListOps(ctx, s.ID)
	if ops[len(ops)-1].Kind != domain.OpRecover {
		t.Fatalf("the holder registered without the machine and no recover op followed: %+v", ops[len(ops)-1])
	}
}

// TestGuardClosesLinksThatLostAccess: a replica closes the links it holds
// whose host lost its access on another replica, woken by TopicHosts or,
// when the wake-up is lost, by its periodic re-check; links still allowed
// stay.
func TestGuardClosesLinksThatLostAccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		recheck time.Duration
		notify  bool
	}{
		{"woken by TopicHosts", time.Hour, true},
		{"periodic re-check", 50 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, f := linkEnv(t, coordinator.Config{LinkRecheck: tt.recheck})
			a, _ := e.AddHost(t, "a", 2)
			b, _ := e.AddHost(t, "b", 2)
			claim(t, e.St, a, "La", time.Now())
			claim(t, e.St, b, "Lb", time.Now())
			f.set(func(f *fakeLinks) {
				f.held = []hostlink.LinkInfo{{ID: "La", HostID: a, TokenID: "tok-a"}, {ID: "Lb", HostID: b, TokenID: "tok-b"}}
			})
			// Once the guard has begun a second pass since, one whole pass
			// saw both links allowed.
			n := f.passes()
			for i := 1; i <= 2; i++ {
				if tt.notify {
					if err := e.St.Notify(ctx, coordinator.TopicHosts); err != nil {
						t.Fatal(err)
					}
				}
				deadline := time.Now().Add(10 * time.Second)
				for f.passes() < n+i && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
			}
			if got := f.passes(); got < n+2 {
				t.Fatalf("the guard made %d passes, want 2", got-n)
			}
			if got := f.closes(); len(got) != 0 {
				t.Fatalf("closed %v while both links were allowed", got)
			}
			if err := e.St.RevokeToken(ctx, "tok-a", time.Now()); err != nil { // as another replica does
				t.Fatal(err)
			}
			if tt.notify {
				if err := e.St.Notify(ctx, coordinator.TopicHosts); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(f.closes()) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := f.closes(); len(got) != 1 || got[0] != string(a)+"/La" {
				t.Fatalf("closed %v, want only host a's link", got)
			}
		})
	}
}

// states lists the states a session's state events moved it to.
func states(evs []domain.Event) []string {
	var out []string
	for _, ev := range evs {
		var d struct{ To string }
		if ev.Type == "state" && json.Unmarshal(ev.Data, &d) == nil {
			out = append(out, d.To)
		}
	}
	return out
}

func hasState(evs []domain.Event, want string) bool {
	for _, s := range states(evs) {
		if s == want {
			return true
		}
	}
	return false
}
