package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// taskStore is the SQLite store, admitting testToken.
type taskStore struct{ store.Store }

func (taskStore) TokenByHash(_ context.Context, hash string) (domain.Token, error) {
	if hash == coordinator.HashToken(testToken) {
		return domain.Token{ID: "t1", Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner}, nil
	}
	return domain.Token{}, store.ErrNotFound
}

// taskAPI is the API over a real coordinator (no hosts, loops not running)
// and a SQLite store holding, oldest first:
//
//	t1  profile alpha, running, sessions s1 then s2, 3 events
//	t2  profile beta, stopped, session s3
//	t3  profile alpha, failed, no session
type taskAPI struct {
	h  http.Handler
	st store.Store
}

const taskReceipt = `{"spec":{"image":"py","harness":"claude-code"},"receipt":{"image":{"id":"img-py","name":"py","ref":"reg/python:3.12","digest":"sha256:py"},` +
	`"harness":{"id":"h1","name":"claude-code","version":"2.1.0","digest":"sha256:cc","protocol":"claude-stream-json"},"model":"sonnet","mode":"plan"}}`

func newTaskAPI(t *testing.T) *taskAPI { t.Helper(); return newTaskAPIWith(t, nil) }

// newTaskAPIWith is newTaskAPI whose task reads go through reads (nil: the
// store itself).
func newTaskAPIWith(t *testing.T, reads func(store.Store) api.TaskReads) *taskAPI {
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
	ad := p.APIDeps(st, log)
	ad.Fleet, ad.Access, ad.TaskReads = taskStore{st}, taskStore{st}, taskStore{st}
	if reads != nil {
		ad.TaskReads = reads(taskStore{st})
	}
	a := &taskAPI{h: api.New(api.Config{}, ad), st: st}
	for _, p := range []domain.Profile{{ID: "prof-a", Name: "alpha"}, {ID: "prof-b", Name: "beta"}} {
		p.Org, p.Spec, p.CreatedAt = domain.FirstOrg, json.RawMessage(`{"image":"py","harness":"claude-code"}`), t0
		if _, err := st.CreateProfile(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i, tk := range []domain.Task{
		{ID: "t1", ProfileID: "prof-a", Title: "add /healthz", SessionID: "s1", State: domain.TaskRunning},
		{ID: "t2", ProfileID: "prof-b", Title: "fix typos", SessionID: "s3", State: domain.TaskStopped},
		{ID: "t3", ProfileID: "prof-a", Title: "clone fails", State: domain.TaskFailed, Error: "clone https://h/x.git: exit 128"},
	} {
		tk.ProfileVersion, tk.Receipt, tk.CreatedAt = 1, json.RawMessage(taskReceipt), t0.Add(time.Duration(i)*time.Minute)
		tk.Owner = domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}
		if _, err := st.CreateTask(ctx, tk); err != nil {
			t.Fatal(err)
		}
		if err := st.SetTaskState(ctx, tk.ID, tk.State, tk.Error, tk.CreatedAt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AttachSession(ctx, "t1", "s2", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	a.append(t, "t1", domain.TaskEvent{Type: "session", Payload: json.RawMessage(`{"session_id":"s1"}`), At: t0},
		domain.TaskEvent{Type: "prompt", Payload: json.RawMessage(`{"text":"add /healthz","turn":"u1"}`), At: t0.Add(time.Second)},
		domain.TaskEvent{Type: "assistant_text", Payload: json.RawMessage(`{"text":"on it","turn":"u1"}`), At: t0.Add(2 * time.Second)})
	return a
}

func (a *taskAPI) append(t *testing.T, id domain.TaskID, evs ...domain.TaskEvent) {
	t.Helper()
	if _, err := a.st.AppendTaskEvents(context.Background(), id, evs); err != nil {
		t.Fatal(err)
	}
}

func (a *taskAPI) do(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

// The events of t1 as the SSE stream frames them.
const (
	sse1 = "id: 1\nevent: session\ndata: {\"seq\":1,\"type\":\"session\",\"data\":{\"session_id\":\"s1\"},\"time\":\"2026-11-30T06:00:00Z\"}\n\n"
	sse2 = "id: 2\nevent: prompt\ndata: {\"seq\":2,\"type\":\"prompt\",\"data\":{\"text\":\"add /healthz\",\"turn\":\"u1\"},\"time\":\"2026-11-30T06:00:01Z\"}\n\n"
	sse3 = "id: 3\nevent: assistant_text\ndata: {\"seq\":3,\"type\":\"assistant_text\",\"data\":{\"text\":\"on it\",\"turn\":\"u1\"},\"time\":\"2026-11-30T06:00:02Z\"}\n\n"
)

func TestTaskRoutes(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	steps := []struct {
		what, method, target, body string
		status                     int
		contains, lacks            []string
	}{
		{"list", "GET", "/v1/tasks", "", 200, []string{`"items":[{"id":"t1","title":"add /healthz","state":"running","profile_id":"prof-a","profile_version":1,"session_id":"s2"`,
			`"error":"clone https://h/x.git: exit 128"`, `"event_seq":3`}, []string{"receipt", "sessions"}},
		{"bad state", "GET", "/v1/tasks?state=running,bogus", "", 400, []string{`"code":"bad_request"`, `unknown task state \"bogus\" (starting, running, idle, stopped, failed)`}, nil},
		{"unknown profile", "GET", "/v1/tasks?profile=nope", "", 404, []string{`"code":"not_found"`, `profile \"nope\"`}, nil},
		{"get", "GET", "/v1/tasks/t1", "", 200, []string{`"sessions":["s1","s2"]`, `"receipt":{"image":{"id":"img-py","name":"py"`, `"model":"sonnet"`}, []string{`"spec"`}},
		{"get unknown", "GET", "/v1/tasks/nope", "", 404, []string{`"code":"not_found"`}, nil},
		{"send to a stopped task", "POST", "/v1/tasks/t2/messages", `{"text":"more"}`, 409, []string{`"code":"conflict"`, "task t2 is stopped"}, nil},
		{"send to a failed task", "POST", "/v1/tasks/t3/messages", `{"text":"more"}`, 409, []string{`"code":"conflict"`, "task t3 is failed"}, nil},
		{"send to an unknown task", "POST", "/v1/tasks/nope/messages", `{"text":"more"}`, 404, nil, nil},
		{"send nothing", "POST", "/v1/tasks/t1/messages", `{"text":""}`, 400, []string{"the prompt is empty"}, nil},
		{"send bad JSON", "POST", "/v1/tasks/t1/messages", `{"text":`, 400, []string{`"code":"bad_request"`}, nil},
		{"start without a prompt", "POST", "/v1/tasks", `{"profile":"alpha"}`, 400, []string{"the prompt is empty"}, nil},
		{"start without a profile", "POST", "/v1/tasks", `{"prompt":"go"}`, 400, []string{"a task needs a profile"}, nil},
		{"start from an unknown profile", "POST", "/v1/tasks", `{"profile":"nope","prompt":"go"}`, 404, []string{`profile \"nope\"`}, nil},
		{"files above /work", "GET", "/v1/tasks/t1/files?path=../etc/passwd", "", 400, []string{"path must stay inside the task's work root /work"}, nil},
		{"files above /work, dotted", "GET", "/v1/tasks/t1/files?path=app/../../etc", "", 400, []string{"path must stay inside"}, nil},
		{"files at ..", "GET", "/v1/tasks/t1/files?path=..", "", 400, []string{"path must stay inside"}, nil},
		{"files at an absolute path outside /work", "GET", "/v1/tasks/t1/files?path=/etc/passwd", "", 400, []string{"path must stay inside"}, nil},
		{"files at /work/../etc", "GET", "/v1/tasks/t1/files?path=/work/../etc", "", 400, []string{"path must stay inside"}, nil},
		{"files at /workspace", "GET", "/v1/tasks/t1/files?path=/workspace", "", 400, []string{"path must stay inside"}, nil},
		{"files of a task without a session", "GET", "/v1/tasks/t3/files?path=app", "", 409, []string{"task t3 has no session"}, nil},
		{"files of an unknown task", "GET", "/v1/tasks/nope/files", "", 404, nil, nil},
		{"events of an unknown task", "GET", "/v1/tasks/nope/events?follow=false", "", 404, nil, nil},
		{"events after a negative seq", "GET", "/v1/tasks/t1/events?follow=false&after=-1", "", 400, []string{"non-negative event index"}, nil},
		{"events after garbage", "GET", "/v1/tasks/t1/events?follow=false&after=x", "", 400, []string{"non-negative event index"}, nil},
		{"diff of an unknown task", "GET", "/v1/tasks/nope/diff", "", 404, nil, nil},
		{"stop an unknown task", "POST", "/v1/tasks/nope/stop", "", 404, nil, nil},
	}
	for _, s := range steps {
		check(t, s.what, a.do(s.method, s.target, s.body), s.status, s.contains, s.lacks)
	}
	// Nothing the refused calls did shows in t1.
	if evs, _ := a.st.ListTaskEvents(context.Background(), "t1", 0, 0); len(evs) != 3 {
		t.Errorf("t1 has %d events, want 3", len(evs))
	}
}

func TestListTasksFilters(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	tests := []struct {
		query string
		want  []string
	}{
		{"", []string{"t1", "t2", "t3"}},
		{"?state=running", []string{"t1"}},
		{"?state=failed,running", []string{"t1", "t3"}},
		{"?state=idle", []string{}},
		{"?profile=alpha", []string{"t1", "t3"}},
		{"?profile=prof-b", []string{"t2"}},
		{"?profile=alpha&state=failed", []string{"t3"}},
		{"?profile=beta&state=running", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			rec := a.do("GET", "/v1/tasks"+tt.query, "")
			var l apiv1.TaskList
			if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != 200 || l.Items == nil {
				t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
			}
			ids := []string{}
			for _, tk := range l.Items {
				ids = append(ids, tk.ID)
				if tk.Receipt != nil {
					t.Errorf("%s listed with its receipt", tk.ID)
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("tasks %v, want %v", ids, tt.want)
			}
		})
	}
}

// TestTaskResponseShape decodes a task into the wire types.
func TestTaskResponseShape(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	rec := a.do("GET", "/v1/tasks/t1", "")
	var tk apiv1.Task
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	if tk.ID != "t1" || tk.State != apiv1.TaskRunning || tk.SessionID != "s2" || !slices.Equal(tk.Sessions, []string{"s1", "s2"}) ||
		tk.EventSeq != 3 || tk.ProfileID != "prof-a" || tk.ProfileVersion != 1 || !tk.CreatedAt.Equal(t0) || !tk.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("task %+v", tk)
	}
	if r := tk.Receipt; r == nil || r.Image.Name != "py" || r.Harness.Version != "2.1.0" || r.Model != "sonnet" || r.Mode != "plan" {
		t.Errorf("receipt %+v", tk.Receipt)
	}
	// A receipt that is not a task record is left out, not an error.
	ctx := context.Background()
	if _, err := a.st.CreateTask(ctx, domain.Task{ID: "t4", ProfileID: "prof-a", Receipt: json.RawMessage(`[1]`), CreatedAt: t0,
		Owner: domain.Owner{OrgID: domain.FirstOrg}}); err != nil {
		t.Fatal(err)
	}
	rec = a.do("GET", "/v1/tasks/t4", "")
	check(t, "odd receipt", rec, 200, []string{`"id":"t4"`, `"state":"starting"`}, []string{"receipt", "sessions"})
}

func TestTaskEventsBacklog(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	tests := []struct {
		name, query string
		lastEventID string
		want        string
	}{
		{"all", "", "", sse1 + sse2 + sse3},
		{"after", "&after=1", "", sse2 + sse3},
		{"Last-Event-ID", "", "2", sse3},
		{"Last-Event-ID wins over after", "&after=0", "2", sse3},
		{"after the last", "&after=3", "", ""},
		{"after more than there are", "&after=99", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hdr []string
			if tt.lastEventID != "" {
				hdr = []string{"Last-Event-ID", tt.lastEventID}
			}
			rec := a.do("GET", "/v1/tasks/t1/events?follow=false"+tt.query, "", hdr...)
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || rec.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("%d %v", rec.Code, rec.Header())
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("stream:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// TestTaskEventsFollow: a followed stream sends the backlog, stays open for
// live events and ends once the task is stopped and every event was sent.
func TestTaskEventsFollow(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/tasks/t1/events?after=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var backlog strings.Builder
	for backlog.Len() < len(sse2+sse3) {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read the backlog: %v (have %q)", err, backlog.String())
		}
		backlog.WriteString(line)
	}
	if backlog.String() != sse2+sse3 {
		t.Fatalf("backlog:\n%s\nwant:\n%s", backlog.String(), sse2+sse3)
	}

	// A live event, then the task stops (as StopTask does: the event, the
	// state, a wake-up).
	a.append(t, "t1", domain.TaskEvent{Type: "stopped", Payload: json.RawMessage(`{"by":"user"}`), At: t0.Add(3 * time.Second)})
	if err := a.st.SetTaskState(ctx, "t1", domain.TaskStopped, "", t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.st.Notify(ctx, "task:t1"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	want := "id: 4\nevent: stopped\ndata: {\"seq\":4,\"type\":\"stopped\",\"data\":{\"by\":\"user\"},\"time\":\"2026-11-30T06:00:03Z\"}\n\n"
	if got := strings.ReplaceAll(string(rest), ": keepalive\n\n", ""); got != want {
		t.Errorf("after the backlog:\n%s\nwant:\n%s", got, want)
	}

	// A stopped task's stream ends after its backlog, even followed.
	rec := a.do("GET", "/v1/tasks/t2/events", "")
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("stopped task without events: %d %q", rec.Code, rec.Body)
	}
	rec = a.do("GET", "/v1/tasks/t1/events?after=2", "")
	if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), sse3) || !strings.HasSuffix(rec.Body.String(), want) {
		t.Errorf("stopped task, followed from 2: %d %q", rec.Code, rec.Body)
	}
}
