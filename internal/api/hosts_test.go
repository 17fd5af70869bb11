package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// fleetAPI is the API over a real coordinator (loops not running) and a
// SQLite store, with a user token and a clock the test moves.
type fleetAPI struct {
	h      http.Handler
	st     store.Store
	secret string
	tokID  string
	mu     sync.Mutex
	now    time.Time
}

func newFleetAPI(t *testing.T) *fleetAPI {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Logger: log}, noHosts{}, log)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleetAPI{st: st, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ad := p.APIDeps(st, log)
	ad.Now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	f.h = api.New(api.Config{}, ad)
	secret, prefix := access.NewSecret()
	f.secret, f.tokID = secret, "user-1"
	if err := st.CreateToken(ctx, domain.Token{ID: f.tokID, Name: "me", Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: f.now}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fleetAPI) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fleetAPI) do(t *testing.T, method, target, body string, out any) int {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.secret)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	if out != nil && rec.Code/100 == 2 {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, target, rec.Body, err)
		}
	}
	return rec.Code
}

func TestHostDisableEnableDelete(t *testing.T) {
	t.Parallel()
	f := newFleetAPI(t)
	var created apiv1.CreateHostResponse
	if code := f.do(t, http.MethodPost, "/v1/hosts", `{"name":"kvm-1"}`, &created); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	id := created.Host.ID
	steps := []struct {
		method, target string
		status         int
		state          string
	}{
		{http.MethodPost, "/v1/hosts/kvm-1/disable", 200, "disabled"}, // by name
		{http.MethodGet, "/v1/hosts/" + id, 200, "disabled"},
		{http.MethodPost, "/v1/hosts/" + id + "/enable", 200, "new"}, // by id
		{http.MethodPost, "/v1/hosts/nope/disable", 404, ""},
		{http.MethodDelete, "/v1/hosts/kvm-1", 200, "deleted"},
		{http.MethodGet, "/v1/hosts/" + id, 200, "deleted"}, // by id it is still shown
		{http.MethodGet, "/v1/hosts/kvm-1", 404, ""},        // by name it is gone
		{http.MethodPost, "/v1/hosts/" + id + "/enable", 404, ""},
		{http.MethodDelete, "/v1/hosts/" + id, 404, ""},
	}
	for _, s := range steps {
		var h apiv1.Host
		code := f.do(t, s.method, s.target, "", &h)
		if code != s.status || (s.state != "" && h.State != s.state) {
			t.Fatalf("%s %s: %d %s; want %d %s", s.method, s.target, code, h.State, s.status, s.state)
		}
	}
	var list apiv1.HostList
	f.do(t, http.MethodGet, "/v1/hosts", "", &list)
	if len(list.Items) != 0 {
		t.Fatalf("list shows deleted hosts: %+v", list.Items)
	}
	var toks apiv1.TokenList
	f.do(t, http.MethodGet, "/v1/tokens", "", &toks)
	for _, tok := range toks.Items {
		if tok.HostID == id {
			t.Fatalf("the deleted host's token is still listed (not revoked): %+v", tok)
		}
	}
	if code := f.do(t, http.MethodPost, "/v1/hosts", `{"name":"kvm-1"}`, nil); code != http.StatusCreated {
		t.Fatalf("the deleted host's name is not free: %d", code)
	}
}

// TestTokenLastUsed: a user token's use is recorded, at most once a minute.
func TestTokenLastUsed(t *testing.T) {
	t.Parallel()
	f := newFleetAPI(t)
	start := f.now
	lastUsed := func() time.Time {
		tok, err := f.st.GetToken(context.Background(), f.tokID)
		if err != nil {
			t.Fatal(err)
		}
		return tok.LastUsedAt
	}
	steps := []struct {
		after time.Duration
		want  time.Duration // last_used_at - start
	}{
		{0, 0},
		{30 * time.Second, 0}, // within the minute: not written again
		{31 * time.Second, time.Minute + time.Second},
	}
	for i, s := range steps {
		f.advance(s.after)
		if code := f.do(t, http.MethodGet, "/v1/hosts", "", nil); code != 200 {
			t.Fatalf("step %d: %d", i, code)
		}
		if got := lastUsed(); !got.Equal(start.Add(s.want)) {
			t.Fatalf("step %d: last_used_at %v, want %v", i, got, start.Add(s.want))
		}
	}
	var toks apiv1.TokenList
	f.do(t, http.MethodGet, "/v1/tokens", "", &toks)
	if len(toks.Items) != 1 || !toks.Items[0].LastUsedAt.Equal(start.Add(time.Minute+time.Second)) {
		t.Fatalf("listed %+v", toks.Items)
	}
	// Revoked through the API, the token stops working at once.
	if code := f.do(t, http.MethodDelete, "/v1/tokens/"+f.tokID, "", nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	if code := f.do(t, http.MethodGet, "/v1/hosts", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("after revoke: %d", code)
	}
}

// TestHostDrainSurvivesReconnect: a drain sets the host's drain flag, so a
// host that registers again (after a restart or a lost link) comes back
// draining; a new or lost host keeps its state until it connects. An
// undrain clears the flag.
func TestHostDrainSurvivesReconnect(t *testing.T) {
	t.Parallel()
	f := newFleetAPI(t)
	ctx := context.Background()
	var created apiv1.CreateHostResponse
	if code := f.do(t, http.MethodPost, "/v1/hosts", `{"name":"kvm-1"}`, &created); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	id := domain.HostID(created.Host.ID)
	register := func() {
		t.Helper()
		if err := f.st.RegisterHost(ctx, domain.Host{ID: id, Name: "kvm-1", LastHeartbeat: f.now}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() string {
		t.Helper()
		var h apiv1.Host
		if code := f.do(t, http.MethodGet, "/v1/hosts/kvm-1", "", &h); code != 200 {
			t.Fatalf("get: %d", code)
		}
		return h.State
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"drain a new host", func() {
			var h apiv1.Host
			if code := f.do(t, http.MethodPost, "/v1/hosts/kvm-1/drain", "", &h); code != 200 || h.State != "new" || !h.Draining {
				t.Fatalf("drain: %d %s, want 200 new", code, h.State)
			}
		}, "new"},
		{"register", register, "draining"},
		{"lose it", func() {
			if _, err := f.st.MarkHostLost(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, "lost"},
		{"reconnect", register, "draining"},
	}
	for _, s := range steps {
		s.do()
		if got := state(); got != s.want {
			t.Fatalf("after %s: %s, want %s", s.name, got, s.want)
		}
	}
	// Undrained, the connected host takes sessions again, and a reconnect
	// keeps it so.
	var h apiv1.Host
	if code := f.do(t, http.MethodPost, "/v1/hosts/kvm-1/undrain", "", &h); code != 200 || h.State != "ready" || h.Draining {
		t.Fatalf("undrain: %d %+v", code, h)
	}
	register()
	if got := state(); got != "ready" {
		t.Fatalf("after undrain and reconnect: %s", got)
	}
	if code := f.do(t, http.MethodDelete, "/v1/hosts/kvm-1", "", nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code := f.do(t, http.MethodPost, "/v1/hosts/"+string(id)+"/drain", "", nil); code != http.StatusNotFound {
		t.Fatalf("drain a deleted host: %d, want 404", code)
	}
}
