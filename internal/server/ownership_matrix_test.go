package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// owned is a session and a task (of that session) of one owner, both
// ended so that no route of them waits on a machine.
type owned struct {
	name  string
	owner domain.Owner
}

// ownedThings are the matrix's resources: a member's own, another
// person's private and shared ones, and another organisation's.
var ownedThings = []owned{
	{"member's own", domain.Owner{OrgID: domain.FirstOrg, UserID: "u-member"}},
	{"admin's private", domain.Owner{OrgID: domain.FirstOrg, UserID: "u-admin"}},
	{"admin's shared", domain.Owner{OrgID: domain.FirstOrg, UserID: "u-admin", Shared: true}},
	{"other organisation's", domain.Owner{OrgID: "org-other", UserID: "u-other", Shared: true}},
}

// sees is who may reach what, by caller (matrixCallers) and thing,
// written out rather than computed: owners and admins every one of
// their organisation, a member their own and the shared ones, a key made
// by the admin (with the member role) the admin's own and the shared.
var sees = map[string][]string{
	"owner":                                 {"member's own", "admin's private", "admin's shared"},
	"admin":                                 {"member's own", "admin's private", "admin's shared"},
	"member":                                {"member's own", "admin's shared"},
	"admin's member key":                    {"admin's private", "admin's shared"},
	"service key (member)":                  {"admin's private", "admin's shared"},
	"other organisation's owner":            {"other organisation's"},
	"member's sign-in cookie":               {"member's own", "admin's shared"},
	"member's sign-in cookie, forged write": {"member's own", "admin's shared"},
}

func makeOwned(t *testing.T, st store.Store) {
	ctx := t.Context()
	prof, err := st.CreateProfile(ctx, domain.Profile{ID: "p-owned", Org: domain.FirstOrg, Name: "owned", Spec: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range ownedThings {
		sid := domain.SessionID(fmt.Sprintf("s-owned-%d", i))
		if _, _, _, err := st.CreateSession(ctx, store.NewSession{ID: sid, OpID: "op-" + string(sid), Spec: domain.SessionSpec{Owner: o.owner}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyTransition(ctx, store.Transition{SessionID: sid, From: domain.SessionCreated, To: domain.SessionDead,
			Event: lifecycle.Unplaceable}); err != nil {
			t.Fatal(err)
		}
		tid := domain.TaskID(fmt.Sprintf("t-owned-%d", i))
		if _, err := st.CreateTask(ctx, domain.Task{ID: tid, ProfileID: prof.ID, ProfileVersion: prof.Version, Title: o.name,
			State: domain.TaskStopped, SessionID: sid, Owner: o.owner}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRouteMatrixOwnership: every route of a session or a task, as every
// caller holding the member grant, on a member's own, another member's
// private and shared, and another organisation's session and task: what
// the caller may not see is 404 with the very answer an id that does not
// exist gets (REST, the SSE streams, the WebSocket terminal, files, the
// egress log, the diff); what it may see gets past (whatever the route
// then says). The lists show each caller exactly what it sees.
func TestRouteMatrixOwnership(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Images: &coordinatortest.Materializer{}}, noHosts{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(api.Config{WaitTimeout: time.Second}, p.APIDeps(st, nil))
	callers := matrixCallers(t, st)
	makeOwned(t, st)
	do := func(c caller, method, path string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(`{"zz_not_a_field":1}`))
		req.Header.Set("Content-Type", "application/json")
		c.present(req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	cells := 0
	for route, rule := range access.Routes() {
		if rule.Scope == "" {
			continue
		}
		method, pattern, _ := strings.Cut(route, " ")
		for _, c := range callers {
			if !c.holds(rule.Need) || (c.forged && method != http.MethodGet) {
				continue // 401 and 403 come first: TestRouteMatrix
			}
			for i, o := range ownedThings {
				cells++
				id := fmt.Sprintf("%s-owned-%d", string(rule.Scope)[:1], i)
				path := strings.Replace(pattern, "{id}", id, 1) + "?follow=false"
				rec := do(c, method, path)
				notThere := fmt.Sprintf(`{"error":"get %s %s: not found","code":"not_found"}`, rule.Scope, id)
				hidden := rec.Code == http.StatusNotFound && strings.TrimSpace(rec.Body.String()) == notThere
				if want := slices.Contains(sees[c.name], o.name); hidden == want {
					t.Errorf("%s %s as %s on %s's %s: %d %s (may see it: %v)", method, path, c.name, o.name, rule.Scope, rec.Code, rec.Body, want)
				}
			}
			// An id that does not exist gets the same answer.
			none := strings.Replace(pattern, "{id}", "none", 1) + "?follow=false"
			if rec := do(c, method, none); rec.Code != http.StatusNotFound {
				t.Errorf("%s %s as %s = %d, want 404", method, none, c.name, rec.Code)
			}
		}
	}
	if cells == 0 {
		t.Fatal("no scoped routes")
	}
	t.Logf("ownership matrix: %d cells (scoped routes x callers with the grant x %d owners)", cells, len(ownedThings))
	checkLists(t, callers, do)
	// The change feed's hosts topic is a fleet operator's.
	for _, c := range callers[1:3] { // the admin and the member
		if rec := do(c, http.MethodGet, "/v1/changes?topics=sessions,hosts"); rec.Code != http.StatusForbidden {
			t.Errorf("the hosts topic as %s = %d, want 403", c.name, rec.Code)
		}
	}
}

// checkLists: the session and task lists show each caller exactly what
// it sees of ownedThings.
func checkLists(t *testing.T, callers []caller, do func(c caller, method, path string) *httptest.ResponseRecorder) {
	t.Helper()
	for _, c := range callers {
		if !c.holds(access.Member) {
			continue
		}
		for _, list := range []string{"/v1/sessions", "/v1/tasks"} {
			rec := do(c, http.MethodGet, list+"?limit=100")
			var got struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
				t.Fatalf("GET %s as %s = %d %s", list, c.name, rec.Code, rec.Body)
			}
			var names []string
			for _, it := range got.Items {
				var i int
				if _, err := fmt.Sscanf(it.ID[strings.LastIndex(it.ID, "-")+1:], "%d", &i); err == nil && strings.Contains(it.ID, "-owned-") {
					names = append(names, ownedThings[i].name)
				}
			}
			want := slices.Clone(sees[c.name])
			slices.Sort(names)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("GET %s as %s lists %v, want %v", list, c.name, names, want)
			}
		}
	}
}
