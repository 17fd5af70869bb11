package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

func newEnv(t *testing.T, cfg coordinator.Config) *coordinatortest.Env {
	t.Helper()
	return coordinatortest.New(t, cfg, nil)
}

func TestCreateBootsOnAHostAndDeleteDestroys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	hostID, h := e.AddHost(t, "a", 4)
	ctx := context.Background()
	s, err := e.Co.CreateSession(ctx, domain.SessionSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	s = e.Wait(t, s.ID, domain.SessionActive)
	if s.HostID != hostID || !h.Running(s.ID) {
		t.Fatalf("active on %q, running=%v; want on %s", s.HostID, h.Running(s.ID), hostID)
	}
	spec := s.Spec
	if spec.MemoryMiB != 256 || spec.VCPUs != 1 {
		t.Fatalf("defaults not applied: %+v", spec)
	}
	if _, err := e.Co.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	e.Wait(t, s.ID, domain.SessionCompleted)
	if h.Running(s.ID) {
		t.Fatal("machine still running after delete")
	}
	evs, _ := e.St.ListEvents(ctx, s.ID, 0, 100)
	var path []string
	for _, ev := range evs {
		var d struct{ To string }
		_ = json.Unmarshal(ev.Data, &d)
		if ev.Type == "state" {
			path = append(path, d.To)
		}
	}
	if got := strings.Join(path, ">"); got != "starting>active>deleting>completed" {
		t.Fatalf("state events %s", got)
	}
}

func TestCreateFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		setup      func(t *testing.T, e *coordinatortest.Env)
		spec       domain.SessionSpec
		wantState  domain.SessionState
		wantReason string
	}{
		{name: "no hosts", wantState: domain.SessionDead, wantReason: "no hosts are registered"},
		{name: "boot fails", setup: func(t *testing.T, e *coordinatortest.Env) {
			_, h := e.AddHost(t, "a", 2)
			h.Mu.Lock()
			h.FailBoot = true
			h.Mu.Unlock()
		},
			wantState: domain.SessionDead, wantReason: "kernel panic"},
		{name: "too big for any host", setup: func(t *testing.T, e *coordinatortest.Env) { e.AddHost(t, "a", 1) },
			spec: domain.SessionSpec{MemoryMiB: 512}, wantState: domain.SessionDead, wantReason: "256 MiB free, 512 MiB asked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, coordinator.Config{PlacementWait: time.Second})
			if tt.setup != nil {
				tt.setup(t, e)
			}
			s, err := e.Co.CreateSession(context.Background(), tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err = e.Co.WaitSession(ctx, s.ID, coordinator.Settled)
			if err != nil || s.State != tt.wantState || !strings.Contains(s.Reason, tt.wantReason) {
				t.Fatalf("got %s %q (%v); want %s with reason containing %q", s.State, s.Reason, err, tt.wantState, tt.wantReason)
			}
		})
	}
}

func TestCreateRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	for _, spec := range []domain.SessionSpec{
		{MemoryMiB: 1}, {MemoryMiB: 1 << 30}, {VCPUs: -1}, {VCPUs: 99}, {Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"A": "x\x00y"}}, {Env: map[string]string{"A": strings.Repeat("x", 70<<10)}},
		{Image: "a b"}, {Image: strings.Repeat("i", 600)},
		{Egress: []string{"exa mple.com"}}, {Egress: []string{"example.com:99999"}}, {Egress: []string{"*."}},
		{Egress: make([]string, 257)},
		{Brokered: []domain.BrokeredGrant{{Host: "git.test:443", SecretID: "s", Access: []domain.RepoAccess{{Path: "/a/../b"}}}}},
		{Brokered: []domain.BrokeredGrant{{Host: "git.test:443", SecretID: "s", Access: make([]domain.RepoAccess, 33)}}},
	} {
		if _, err := e.Co.CreateSession(context.Background(), spec, ""); !errors.Is(err, domain.ErrInvalid) {
			t.Errorf("spec %+v: err %v, want ErrInvalid", spec, err)
		}
	}
	if ss, _ := e.St.ListSessions(context.Background(), domain.SessionFilter{}); len(ss) != 0 {
		t.Fatalf("bad input created %d sessions", len(ss))
	}
}

// TestEgressPinnedAndSent: a session's egress list is stored sorted and
// without repeats, and its host is told it with the machine's spec.
func TestEgressPinnedAndSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	_, h := e.AddHost(t, "a", 4)
	ctx := context.Background()
	s, err := e.Co.CreateSession(ctx, domain.SessionSpec{Egress: []string{"pypi.org", "*.github.com", "pypi.org", "example.com:8443"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*.github.com", "example.com:8443", "pypi.org"}
	if !slices.Equal(s.Spec.Egress, want) {
		t.Fatalf("stored egress %q, want %q", s.Spec.Egress, want)
	}
	e.Wait(t, s.ID, domain.SessionActive)
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if len(h.Starts) == 0 || !slices.Equal(h.Starts[len(h.Starts)-1].Spec.Egress, want) {
		t.Fatalf("host starts %+v, want the last with egress %q", h.Starts, want)
	}
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	e.AddHost(t, "a", 4)
	a, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "key-1")
	if err != nil || a.ID != b.ID {
		t.Fatalf("second create: %v, id %s vs %s", err, b.ID, a.ID)
	}
}

func TestHostLostMakesActiveSessionsDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{HeartbeatInterval: 50 * time.Millisecond, HostLostAfter: 300 * time.Millisecond, MonitorInterval: 50 * time.Millisecond})
	hostID, _ := e.AddHost(t, "a", 4)
	stop := e.KeepAlive(t, hostID)
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	e.Wait(t, s.ID, domain.SessionActive)
	stop() // heartbeats stop: the host goes lost and its session dies
	s = e.Wait(t, s.ID, domain.SessionDead)
	if !strings.Contains(s.Reason, string(hostID)) {
		t.Fatalf("reason %q does not name the host", s.Reason)
	}
	h, _ := e.St.GetHost(context.Background(), hostID)
	if h.State != domain.HostLost {
		t.Fatalf("host state %s, want lost", h.State)
	}
	req := httptest.NewRequest("POST", hostlink.PathHeartbeat, strings.NewReader(`{}`))
	rec := httptest.NewRecorder()
	e.HostLink().ServeHTTP(rec, req.WithContext(hostlink.WithHostID(req.Context(), hostID)))
	var hb hostlink.HeartbeatResponse
	if err := json.NewDecoder(rec.Body).Decode(&hb); err != nil || len(hb.Owned) != 0 {
		t.Fatalf("lost host still owns %v (%v)", hb.Owned, err)
	}
}

func TestDeleteSupersedesCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	// No host yet: the create op sits in placement; delete must win.
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	if _, err := e.Co.DeleteSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	e.AddHost(t, "a", 4)
	s = e.Wait(t, s.ID, domain.SessionCompleted)
	// The op is finished just after its last transition lands.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ops, _ := e.St.ListOps(context.Background(), s.ID)
		kinds := map[domain.OpKind]domain.OpState{}
		for _, o := range ops {
			kinds[o.Kind] = o.State
		}
		if kinds[domain.OpDestroy] == domain.OpSucceeded && kinds[domain.OpCreate] == domain.OpSuperseded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ops %+v; want create superseded, destroy succeeded", kinds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRegisterAndHeartbeatReportOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	hostID, _ := e.AddHost(t, "a", 4)
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.Wait(t, s.ID, domain.SessionActive)
	if err := e.St.SetHostState(context.Background(), hostID, domain.HostLost); err != nil {
		t.Fatal(err)
	}
	body := `{"capacity":{"memory_mib":1024,"vcpus":4}}`
	req := httptest.NewRequest("POST", hostlink.PathHeartbeat, strings.NewReader(body))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	e.HostLink().ServeHTTP(rec, req)
	var hb hostlink.HeartbeatResponse
	if err := json.NewDecoder(rec.Body).Decode(&hb); err != nil || rec.Code != 200 {
		t.Fatalf("heartbeat: %d %v", rec.Code, err)
	}
	if len(hb.Owned) != 1 || hb.Owned[0].SessionID != string(s.ID) || hb.Owned[0].Epoch != s.Epoch {
		t.Fatalf("owned %+v, want %s@%d", hb.Owned, s.ID, s.Epoch)
	}
	if h, _ := e.St.GetHost(context.Background(), hostID); h.State != domain.HostReady {
		t.Fatalf("returning host is %s, want ready", h.State)
	}
}

// TestRegisterReportsCachedSnapshots: the snapshots a host caches count
// for placement from its registration, not only from its next heartbeat.
func TestRegisterReportsCachedSnapshots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	hostID, _ := e.AddHost(t, "a", 4)
	body := `{"name":"a","capacity":{"memory_mib":1024,"vcpus":4},"snapshots":["snap-1","snap-2"]}`
	req := httptest.NewRequest("POST", hostlink.PathRegister, strings.NewReader(body))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	e.HostLink().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("register: %d %s", rec.Code, rec.Body)
	}
	h, err := e.St.GetHost(context.Background(), hostID)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.Capacity.CachedSnapshots, ","); got != "snap-1,snap-2" {
		t.Fatalf("cached snapshots after register: %+v", h.Capacity.CachedSnapshots)
	}
}

func TestCapacityRefusalPlacesElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	_, a := e.AddHost(t, "a", 8) // more free memory: chosen first, but refuses
	a.Mu.Lock()
	a.Full = true
	a.Mu.Unlock()
	bID, _ := e.AddHost(t, "b", 2)
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.Wait(t, s.ID, domain.SessionActive)
	if s.HostID != bID {
		t.Fatalf("active on %s, want %s after a's refusal", s.HostID, bID)
	}
}

func TestUnreachableHostIsRetriedNotFatal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	id, _ := e.AddHost(t, "a", 4)
	e.Fleet.Down(id, 2) // the first two calls find no link
	s, _ := e.Co.CreateSession(context.Background(), domain.SessionSpec{}, "")
	s = e.Wait(t, s.ID, domain.SessionActive)
	ops, _ := e.St.ListOps(context.Background(), s.ID)
	if len(ops) != 1 || ops[0].Attempts < 3 {
		t.Fatalf("ops %+v: want one create op claimed 3+ times", ops)
	}
}
