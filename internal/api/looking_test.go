package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
)

// lookWindow is how long each read route is read, over and over (or held
// open, for a stream), while the session must stay idle.
const lookWindow = 30 * time.Second

// lookRoute is one way of reading a route: the request, and whether it
// reaches the session's VM (and so resumes an idle session, by design) or
// is served from the database (and must not).
type lookRoute struct {
	route   string // its apiv1 route
	target  string // the request's path and query
	resumes bool   // it reaches the VM: an idle session resumes
	code    int    // for one served from the database: the answer it gets
}

// lookRoutes is every read (GET) route of the API. Those served from the
// database include a session's events without follow=true and a task's
// conversation; following a session's events (follow=true, the
// default) is a live subscription and resumes it, as exec, files and the
// terminal do.
func lookRoutes(sid domain.SessionID, tid domain.TaskID) []lookRoute {
	s, tk := "/v1/sessions/"+string(sid), "/v1/tasks/"+string(tid)
	db := func(route, target string, code int) lookRoute {
		return lookRoute{route: route, target: target, code: code}
	}
	vm := func(route, target string) lookRoute { return lookRoute{route: route, target: target, resumes: true} }
	return []lookRoute{
		db(apiv1.RouteVersion, "/v1/version", 200),
		db(apiv1.RouteOpenAPI, "/v1/openapi.yaml", 404), // the test server serves no document
		db(apiv1.RouteListSessions, "/v1/sessions", 200),
		db(apiv1.RouteListSessions, "/v1/sessions?state=idle", 200),
		db(apiv1.RouteGetSession, s, 200),
		db(apiv1.RouteEvents, s+"/events?follow=false", 200),
		db(apiv1.RouteEvents, s+"/events?follow=false&after=1", 200),
		db(apiv1.RouteOutboxList, s+"/outbox", 200),
		db(apiv1.RouteEgress, s+"/egress", 200),
		db(apiv1.RouteChanges, "/v1/changes?topics=sessions,tasks,hosts", 200),
		db(apiv1.RouteListTasks, "/v1/tasks", 200),
		db(apiv1.RouteGetTask, tk, 200),
		db(apiv1.RouteTaskEvents, tk+"/events?follow=false", 200),
		db(apiv1.RouteTaskEvents, tk+"/events?follow=true", 200),
		db(apiv1.RouteTaskEvents, tk+"/events", 200),
		db(apiv1.RouteListHosts, "/v1/hosts", 200),
		db(apiv1.RouteGetHost, "/v1/hosts/a", 200),
		db(apiv1.RouteListTokens, "/v1/tokens", 200),
		db(apiv1.RouteWhoAmI, "/v1/me", 200),
		db(apiv1.RouteListMembers, "/v1/members", 200),
		db(apiv1.RouteListIdentities, "/v1/me/identities", 200),
		db(apiv1.RouteListAudit, "/v1/audit", 200),
		db(apiv1.RouteListImages, "/v1/images", 200),
		db(apiv1.RouteGetImage, "/v1/images/none", 404),
		db(apiv1.RouteImageJobs, "/v1/images/none/jobs", 404),
		db(apiv1.RouteGetImageJob, "/v1/image-jobs/none", 404),
		db(apiv1.RouteListHarnesses, "/v1/harnesses", 200),
		db(apiv1.RouteGetHarness, "/v1/harnesses/none", 404),
		db(apiv1.RouteListSecrets, "/v1/secrets", 200),
		db(apiv1.RouteListProfiles, "/v1/profiles", 200),
		db(apiv1.RouteGetProfile, "/v1/profiles/look", 200),
		db(apiv1.RouteListAutomations, "/v1/automations", 503), // this server runs no automations,
		db(apiv1.RouteGetAutomation, "/v1/automations/none", 503),
		db(apiv1.RouteListRuns, "/v1/automations/none/runs", 503),
		db(apiv1.RouteGetRun, "/v1/runs/none", 503),
		db(apiv1.RouteListBuiltins, "/v1/automation-builtins", 503),
		db(apiv1.RouteListIntegrations, "/v1/integrations", 200),
		db(apiv1.RouteAuthConfig, "/v1/auth/config", 404), // this test server serves no sign-in (package signin's tests do)
		db(apiv1.RouteOIDCStart, "/v1/auth/oidc/start", 404),
		db(apiv1.RouteOIDCCallback, "/v1/auth/oidc/callback", 404),
		// A live subscription, and whatever needs the VM's processes or disk.
		vm(apiv1.RouteEvents, s+"/events?follow=true"),
		vm(apiv1.RouteEvents, s+"/events"),
		vm(apiv1.RouteExecWS, s+"/exec/ws"),
		vm(apiv1.RouteFileGet, s+"/files?path=/etc/hostname"),
		vm(apiv1.RouteFileList, s+"/files/list?path=/"),
		vm(apiv1.RouteFileStat, s+"/files/stat?path=/"),
		vm(apiv1.RouteTaskDiff, tk+"/diff"),
		vm(apiv1.RouteTaskFiles, tk+"/files?path=app"),
	}
}

// TestLookingNeverResumes: reading an idle session, its task and every
// other read route for 30 s each (a stream held open that long, any other
// read repeated each second) starts no op and no VM; the routes that reach
// the VM (a followed event stream, exec, files, the terminal, a task's
// diff and files) each resume it. Every GET route of apiv1 is in the
// table, so a new one must say which it is.
func TestLookingNeverResumes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newLookWorld(t)
		routes := lookRoutes(w.sid, w.tid)
		for _, r := range apiRoutes(t) {
			if strings.HasPrefix(r, http.MethodGet+" ") && !slices.ContainsFunc(routes, func(l lookRoute) bool { return l.route == r }) {
				t.Errorf("read route %s is not in lookRoutes: say whether it is served from the database or resumes", r)
			}
		}
		for _, r := range routes {
			if r.resumes {
				continue
			}
			before := w.look(t)
			codes := w.read(t, r.target)
			if after := w.look(t); after != before {
				t.Errorf("GET %s for %s: the idle session woke: %+v, was %+v", r.target, lookWindow, after, before)
				w.suspend(t) // the next route starts from an idle session again
			}
			if len(codes) == 0 || slices.ContainsFunc(codes, func(c int) bool { return c != r.code }) {
				t.Errorf("GET %s answered %v, want %d each time", r.target, codes, r.code)
			}
		}
		for _, r := range routes {
			if !r.resumes {
				continue
			}
			before := w.look(t)
			w.read(t, r.target)
			synctest.Wait()
			after := w.look(t)
			if after.resumes != before.resumes+1 || after.starts != before.starts+1 {
				t.Errorf("GET %s: want one resume op and one VM start, got %+v, was %+v", r.target, after, before)
			}
			w.suspend(t)
		}
	})
}

// lookWorld is the API over a running coordinator and SQLite store with
// one fake host, an idle session sid (suspended after it ran) and a task
// tid working in it with one cloned repository.
type lookWorld struct {
	env  *coordinatortest.Env
	host *coordinatortest.FakeHost
	srv  http.Handler
	sid  domain.SessionID
	tid  domain.TaskID
}

// lookState is what would change if the session woke.
type lookState struct {
	state   domain.SessionState
	ops     int // ops of the session, all kinds
	resumes int // its resume ops
	starts  int // VMs the host started
	running bool
}

func newLookWorld(t *testing.T) *lookWorld {
	t.Helper()
	ctx := context.Background()
	st, fleet := coordinatortest.NewStore(t), coordinatortest.NewFleet()
	log := slog.New(slog.DiscardHandler)
	p, err := server.Assemble(server.Config{ReplicaID: "r1"}, server.Deps{Store: st, Logger: log}, fleet, log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = p.Co.Run(runCtx); close(ran) }()
	t.Cleanup(func() { stop(); <-ran })
	w := &lookWorld{env: &coordinatortest.Env{St: st, Co: p.Co, Fleet: fleet}, tid: "task-look"}
	var hostID domain.HostID
	hostID, w.host = fleet.Add(t, st, "a", 4, coordinatortest.TestFacts)
	w.env.KeepAlive(t, hostID)
	ad := p.APIDeps(st, log)
	ad.Fleet, ad.Access, ad.TaskReads = taskStore{st}, taskStore{st}, taskStore{st}
	w.srv = api.New(api.Config{}, ad)

	s, err := p.Co.CreateSession(ctx, domain.SessionSpec{IdleTimeoutSec: -1, Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}}, "")
	if err != nil {
		t.Fatal(err)
	}
	w.sid = s.ID
	w.env.Wait(t, w.sid, domain.SessionActive)
	prof, err := st.CreateProfile(ctx, domain.Profile{ID: "prof-look", Org: domain.FirstOrg, Name: "look", Spec: json.RawMessage(`{"image":"py","harness":"claude-code"}`), CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateTask(ctx, domain.Task{ID: w.tid, ProfileID: prof.ID, ProfileVersion: prof.Version, Title: "look", SessionID: w.sid, Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner},
		Receipt: json.RawMessage(taskReceipt), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendTaskEvents(ctx, w.tid, []domain.TaskEvent{
		{Type: "session", Payload: json.RawMessage(`{"session_id":"` + string(w.sid) + `"}`)},
		{Type: "repo_cloned", Payload: json.RawMessage(`{"path":"app","url":"https://git.example/app.git","base":"abc"}`)},
		{Type: "prompt", Payload: json.RawMessage(`{"text":"look","turn":"u1"}`)},
	}); err != nil {
		t.Fatal(err)
	}
	w.suspend(t)
	return w
}

// suspend suspends the session and waits until it is idle.
func (w *lookWorld) suspend(t *testing.T) {
	t.Helper()
	if _, _, err := w.env.Co.Suspend(context.Background(), w.sid); err != nil {
		t.Fatal(err)
	}
	w.env.Wait(t, w.sid, domain.SessionIdle)
	synctest.Wait()
}

// look reads the session's state, its ops and the host's VMs, once every
// goroutine of the bubble is idle.
func (w *lookWorld) look(t *testing.T) lookState {
	t.Helper()
	synctest.Wait()
	ctx := context.Background()
	s, err := w.env.St.GetSession(ctx, w.sid)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := w.env.St.ListOps(ctx, w.sid)
	if err != nil {
		t.Fatal(err)
	}
	out := lookState{state: s.State, ops: len(ops), running: w.host.Running(w.sid)}
	for _, o := range ops {
		if o.Kind == domain.OpResume {
			out.resumes++
		}
	}
	w.host.Mu.Lock()
	out.starts = len(w.host.Starts)
	w.host.Mu.Unlock()
	return out
}

// read GETs target over and over for lookWindow (a stream stays open
// until the window ends) and returns the status of each answer.
func (w *lookWorld) read(t *testing.T, target string) []int {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(lookWindow))
	defer cancel()
	var codes []int
	for time.Since(start) < lookWindow {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		w.srv.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
		if time.Since(start) < lookWindow {
			time.Sleep(time.Second)
		}
	}
	return codes
}
