package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/clienttest"
)

// taskFakeAPI serves the task routes from memory. A task's GET reports
// EventSeq as set (events past it play live events: the stream sends
// them after the backlog); a send appends the prompt, then the task's
// afterSend events.
type taskFakeAPI struct {
	mu        sync.Mutex
	tasks     []*apiv1.Task
	events    map[string][]apiv1.TaskEvent
	afterSend map[string][]apiv1.TaskEvent
	diffs     map[string]apiv1.TaskDiff
}

// tev is event seq of a task at BaseTime + seq seconds.
func tev(seq int64, typ, data string) apiv1.TaskEvent {
	return apiv1.TaskEvent{Seq: seq, Type: typ, Data: json.RawMessage(data), Time: clienttest.BaseTime().Add(time.Duration(seq) * time.Second)}
}

// t1Usage is what task t1 used.
var t1Usage = apiv1.TaskUsage{Model: "claude-sonnet-4-5", TokenCounts: apiv1.TokenCounts{InputTokens: 25_089, OutputTokens: 1_250, CacheReadTokens: 20_000, CacheWriteTokens: 3_000},
	Cost: &apiv1.Money{Amount: "0.1234", Micros: 123_400, Currency: "USD"}, Unpriced: 1}

// withUsage is e with the usage the API reads from a usage event.
func withUsage(e apiv1.TaskEvent, u apiv1.TurnUsage) apiv1.TaskEvent { e.Usage = &u; return e }

func ago(d time.Duration) time.Time { return clienttest.BaseTime().Add(-d) }

func newTaskServer(t *testing.T) *clienttest.Server {
	t.Helper()
	f := &taskFakeAPI{
		tasks: []*apiv1.Task{
			{ID: "t1", Title: "add a /healthz endpoint", State: "running", ProfileID: "prof-go", ProfileVersion: 3, SessionID: "s1", EventSeq: 16,
				RunID: "run-9", CreatedAt: ago(time.Hour), UpdatedAt: ago(90 * time.Second), Usage: t1Usage},
			{ID: "t2", Title: "rename every occurrence of the old module path across the repository", State: "stopped", ProfileID: "prof-go", UpdatedAt: ago(3 * time.Hour)},
			{ID: "t3", Title: "fix typos", State: "idle", Error: "auth: key refused", ProfileID: "prof-docs", SessionID: "s3", EventSeq: 4, StartedBy: "alice-cli", UpdatedAt: ago(72 * time.Hour)},
			{ID: "t4", Title: "two turns", State: "running", ProfileID: "prof-docs", SessionID: "s4", EventSeq: 8, UpdatedAt: ago(5 * time.Second)},
			{ID: "t5", Title: "queued follow-up", State: "running", ProfileID: "prof-docs", SessionID: "s5", EventSeq: 4, UpdatedAt: ago(125 * time.Second)},
		},
		events: map[string][]apiv1.TaskEvent{
			"t1": {
				tev(1, "session", `{"session_id":"s1"}`),
				tev(2, "repo_cloned", `{"path":"app","url":"https://github.com/acme/app.git","ref":"main","base":"0123456789abcdef0123456789abcdef01234567"}`),
				tev(3, "prompt", `{"turn":"u1","text":"add a /healthz endpoint\nwith a test"}`),
				tev(4, "run_started", `{"harness":"claude-code","version":"2.1.0","model":"sonnet","turn":"u1"}`),
				tev(5, "assistant_text", `{"text":"I'll add it.\nFirst, the handler.\n","turn":"u1"}`),
				tev(6, "tool_call", `{"id":"c1","name":"Bash","input":{"command":"go test ./..."},"turn":"u1"}`),
				tev(7, "tool_result", `{"id":"c1","output":"  FAIL main_test.go\n","is_error":true,"turn":"u1"}`),
				tev(8, "tool_result", `{"id":"c2","output":"ok","is_error":false,"turn":"u1"}`),
				tev(9, "file_changed", `{"path":"main.go","change":"update","turn":"u1"}`),
				withUsage(tev(10, "usage", `{"input_tokens":1200,"output_tokens":80,"cost_usd":0.0123,"turn":"u1"}`), apiv1.TurnUsage{Model: "claude-opus-5-5",
					TokenCounts: apiv1.TokenCounts{InputTokens: 1200, OutputTokens: 80}, Cost: &apiv1.Money{Amount: "0.0123", Micros: 12_300, Currency: "USD"}, PriceTable: "harness"}),
				tev(11, "question", `{"text":"Which port?","turn":"u1"}`),
				tev(12, "error", `{"kind":"model","message":"overloaded","turn":"u1"}`),
				tev(13, "idle", `{"result":"done","turn":"u1"}`),
				tev(14, "setup_failed", `{"message":"clone https://h/x.git: exit 128"}`),
				tev(15, "stopped", `{"by":"user"}`),
				tev(16, "custom", `{"a":1}`),
			},
			"t3": {
				tev(1, "prompt", `{"turn":"u1","text":"fix typos"}`),
				tev(2, "run_started", `{"harness":"claude-code","version":"2.1.0","model":"sonnet","turn":"u1"}`),
				tev(3, "error", `{"kind":"auth","message":"key refused","turn":"u1"}`),
				tev(4, "idle", `{"turn":"u1"}`),
			},
			"t4": {
				tev(1, "session", `{"session_id":"s4"}`),
				tev(2, "prompt", `{"turn":"u1","text":"first"}`),
				tev(3, "run_started", `{"harness":"shell","version":"1","model":"m","turn":"u1"}`),
				tev(4, "idle", `{"turn":"u1"}`),
				tev(5, "prompt", `{"turn":"u2","text":"second"}`),
				tev(6, "run_started", `{"harness":"shell","version":"1","model":"m","turn":"u2"}`),
				tev(7, "assistant_text", `{"text":"working on the second","turn":"u2"}`),
				withUsage(tev(8, "usage", `{"input_tokens":1,"output_tokens":2,"cost_usd":0,"turn":"u2"}`), apiv1.TurnUsage{TokenCounts: apiv1.TokenCounts{InputTokens: 1, OutputTokens: 2}}),
				tev(9, "idle", `{"turn":"u2"}`), // live from here
				tev(10, "assistant_text", `{"text":"not shown"}`),
			},
			"t5": {
				tev(1, "session", `{"session_id":"s5"}`),
				tev(2, "prompt", `{"turn":"u1","text":"first"}`),
				tev(3, "run_started", `{"harness":"shell","version":"1","model":"m","turn":"u1"}`),
				tev(4, "assistant_text", `{"text":"thinking","turn":"u1"}`),
			},
		},
		afterSend: map[string][]apiv1.TaskEvent{
			// The turn running when the follow-up came ends first.
			"t5": {
				tev(6, "assistant_text", `{"text":"first answer","turn":"u1"}`),
				tev(7, "idle", `{"turn":"u1"}`),
				tev(8, "run_started", `{"harness":"shell","version":"1","model":"m","turn":"u2"}`),
				tev(9, "assistant_text", `{"text":"second answer","turn":"u2"}`),
				tev(10, "idle", `{"turn":"u2"}`),
				tev(11, "assistant_text", `{"text":"not shown"}`),
			},
		},
		diffs: map[string]apiv1.TaskDiff{
			"t1": {Repos: []apiv1.RepoDiff{
				{Path: "app", URL: "https://h/app.git", Base: "b1", Diff: "diff --git a/main.go b/main.go\nindex 1..2 100644\n--- a/main.go\n+++ b/main.go\n@@ -1 +1 @@\n-a\n+b\n"},
				{Path: "lib", URL: "https://h/lib.git", Base: "b2"},
				{Path: "web", URL: "https://h/web.git", Base: "b3", Diff: "diff --git a/x.txt b/x.txt\nnew file mode 100644\n--- /dev/null\n+++ b/x.txt\n@@ -0,0 +1 @@\n+x\n"},
			}},
			"t3": {Repos: []apiv1.RepoDiff{}},
		},
	}
	ts := httptest.NewServer(f.routes())
	t.Cleanup(ts.Close)
	return &clienttest.Server{URL: ts.URL}
}

func taskFakeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiv1.Error{Error: msg, Code: code})
}

func taskFakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *taskFakeAPI) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tasks", f.listTasks)
	mux.HandleFunc("POST /v1/tasks", f.startTask)
	mux.HandleFunc("GET /v1/tasks/{id}", f.withTask(func(w http.ResponseWriter, _ *http.Request, t *apiv1.Task) {
		taskFakeJSON(w, http.StatusOK, t)
	}))
	mux.HandleFunc("GET /v1/tasks/{id}/events", f.withTask(f.taskEvents))
	mux.HandleFunc("POST /v1/tasks/{id}/messages", f.withTask(f.sendTask))
	mux.HandleFunc("POST /v1/tasks/{id}/stop", f.withTask(func(w http.ResponseWriter, _ *http.Request, t *apiv1.Task) {
		t.State = "stopped"
		taskFakeJSON(w, http.StatusOK, t)
	}))
	mux.HandleFunc("GET /v1/tasks/{id}/diff", f.withTask(func(w http.ResponseWriter, _ *http.Request, t *apiv1.Task) {
		taskFakeJSON(w, http.StatusOK, f.diffs[t.ID])
	}))
	mux.HandleFunc("GET /v1/tasks/{id}/files", f.withTask(taskFiles))
	return mux
}

// withTask checks the token and calls h with the task named in the path,
// holding f.mu.
func (f *taskFakeAPI) withTask(h func(http.ResponseWriter, *http.Request, *apiv1.Task)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+clienttest.Token {
			taskFakeError(w, http.StatusUnauthorized, "unauthorized", "bad token")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, t := range f.tasks {
			if t.ID == r.PathValue("id") {
				h(w, r, t)
				return
			}
		}
		taskFakeError(w, http.StatusNotFound, "not_found", "task "+r.PathValue("id")+" not found")
	}
}

func (f *taskFakeAPI) listTasks(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var states []string
	if q := r.URL.Query().Get("state"); q != "" {
		states = strings.Split(q, ",")
	}
	for _, st := range states {
		if !slices.Contains([]string{"starting", "running", "idle", "stopped", "failed"}, st) {
			taskFakeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("unknown task state %q (starting, running, idle, stopped, failed)", st))
			return
		}
	}
	out := apiv1.TaskList{Items: []apiv1.Task{}}
	for _, t := range f.tasks {
		if states != nil && !slices.Contains(states, t.State) {
			continue
		}
		if p := r.URL.Query().Get("profile"); p != "" && t.ProfileID != "prof-"+p {
			continue
		}
		out.Items = append(out.Items, *t)
	}
	taskFakeJSON(w, http.StatusOK, out)
}

func (f *taskFakeAPI) startTask(w http.ResponseWriter, r *http.Request) {
	var req apiv1.StartTaskRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		taskFakeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if req.Profile != "go" {
		taskFakeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("profile %q: not found", req.Profile))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	title := req.Title
	if title == "" {
		title, _, _ = strings.Cut(req.Prompt, "\n")
	}
	t := &apiv1.Task{ID: "t9", Title: title, State: "starting", ProfileID: "prof-" + req.Profile, SessionID: "s9", ProfileVersion: 3,
		CreatedAt: clienttest.BaseTime(), UpdatedAt: clienttest.BaseTime(), Receipt: &apiv1.Receipt{ // recorded before its first events
			Hosts: []apiv1.ReceiptHost{{Host: "api.anthropic.com:443", Reachable: true, Via: apiv1.ViaGateway}, {Host: "github.com", Reachable: true, Via: apiv1.ViaBrokered},
				{Host: "pypi.org", Reachable: true, Via: apiv1.ViaProxy}, {Host: "old.example", Reachable: false}},
			Enforcement: []apiv1.ReceiptEnforcement{{Backend: "qemu", Enforced: true}, {Backend: "firecracker", Enforced: true}, {Backend: "process"}}}}
	f.tasks = append(f.tasks, t)
	text, _ := json.Marshal(req.Prompt)
	f.events["t9"] = []apiv1.TaskEvent{
		tev(1, "session", `{"session_id":"s9"}`),
		tev(2, "prompt", `{"turn":"u1","text":`+string(text)+`}`),
		tev(3, "run_started", `{"harness":"shell","version":"1","model":"m","turn":"u1"}`),
		tev(4, "assistant_text", `{"text":"done it","turn":"u1"}`),
		tev(5, "idle", `{"turn":"u1"}`),
		tev(6, "assistant_text", `{"text":"not shown"}`),
	}
	taskFakeJSON(w, http.StatusCreated, t)
}

func (f *taskFakeAPI) taskEvents(w http.ResponseWriter, r *http.Request, t *apiv1.Task) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range f.events[t.ID] {
		if e.Seq > after {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
		}
	}
}

func (f *taskFakeAPI) sendTask(w http.ResponseWriter, r *http.Request, t *apiv1.Task) {
	var req apiv1.SendTaskRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		taskFakeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if t.State == "stopped" || t.State == "failed" {
		taskFakeError(w, http.StatusConflict, "conflict", fmt.Sprintf("not active: task %s is %s", t.ID, t.State))
		return
	}
	text, _ := json.Marshal(req.Text)
	e := tev(int64(len(f.events[t.ID])+1), "prompt", `{"turn":"u2","text":`+string(text)+`}`)
	f.events[t.ID] = append(append(f.events[t.ID], e), f.afterSend[t.ID]...)
	t.EventSeq = e.Seq
	taskFakeJSON(w, http.StatusAccepted, e)
}

func taskFiles(w http.ResponseWriter, r *http.Request, _ *apiv1.Task) {
	switch r.URL.Query().Get("path") {
	case "", "app":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[{"name":"main.go","size":13,"mode":"-rw-r--r--","is_dir":false},{"name":"cmd","size":0,"mode":"drwxr-xr-x","is_dir":true}]`)
	case "app/main.go":
		w.Header().Set("Content-Type", "application/octet-stream")
		fmt.Fprint(w, "package main\n")
	default:
		taskFakeError(w, http.StatusBadRequest, "bad_request", "path must stay inside the task's work root /work")
	}
}

// t1Conversation is how task show prints t1's events.
const t1Conversation = `06:00:01   [session s1]
06:00:02   [cloned https://github.com/acme/app.git at 0123456789a… into app]
06:00:03 > add a /healthz endpoint
           with a test
06:00:04   [claude-code 2.1.0, model sonnet]
06:00:05   I'll add it.
           First, the handler.
06:00:06   [tool] Bash {"command":"go test ./..."}
06:00:07   [tool error] FAIL main_test.go
06:00:08   [tool ok] ok
06:00:09   [file update] main.go
06:00:10   [usage] claude-opus-5-5: 1,200 in, 80 out tokens, $0.012 (reckoned by the harness)
06:00:11 ? Which port?
06:00:12 ! model error: overloaded
06:00:13   [done]
06:00:14 ! setup failed: clone https://h/x.git: exit 128
06:00:15   [stopped]
06:00:16   [custom] {"a":1}
`

// startGrants is what `task start` says on stderr of the fake's receipt:
// which backends enforce its egress, and how each host is reached.
const startGrants = "egress: enforced on qemu, firecracker; NOT enforced on process (see `engrams profile get go`)\n" +
	"reaches: api.anthropic.com:443 (gateway), github.com (brokered), pypi.org (proxy)\n"

func TestTaskCommands(t *testing.T) {
	t.Parallel()
	runTable(t, newTaskServer, []cmdTest{
		{name: "list running", args: []string{"task", "list", "--state", "running,idle"},
			stdout: "ID  STATE    TITLE                    SESSION  COST                   UPDATED\n" +
				"t1  running  add a /healthz endpoint  s1       $0.12 (+1 not priced)  1m ago\n" +
				"t3  idle     fix typos                s3       -                      3d ago\n" +
				"t4  running  two turns                s4       -                      5s ago\n" +
				"t5  running  queued follow-up         s5       -                      2m ago\n"},
		{name: "list of a profile", args: []string{"task", "list", "--profile", "go"},
			stdout: "ID  STATE    TITLE                                               SESSION  COST                   UPDATED\n" +
				"t1  running  add a /healthz endpoint                             s1       $0.12 (+1 not priced)  1m ago\n" +
				"t2  stopped  rename every occurrence of the old module path ac…  -        -                      3h ago\n"},
		{name: "list json: exact cost", args: []string{"task", "list", "--json", "--profile", "go"},
			contains: []string{`"cost": {` + "\n" + `          "amount": "0.1234",` + "\n" + `          "micros": 123400,` + "\n" + `          "currency": "USD"`, `"run_id": "run-9"`}},
		{name: "list json", args: []string{"task", "list", "--json", "--state", "idle"},
			contains: []string{"{\n  \"items\": [\n    {\n      \"id\": \"t3\",\n", `"error": "auth: key refused"`, `"profile_id": "prof-docs"`}},
		{name: "list empty", args: []string{"tasks", "list", "--profile", "none"}, stdout: "ID  STATE  TITLE  SESSION  COST  UPDATED\n"},
		{name: "list bad state", args: []string{"task", "list", "--state", "bogus"}, code: 1,
			errContain: []string{"error: list tasks: unknown task state \"bogus\" (starting, running, idle, stopped, failed) (HTTP 400 bad_request)\n"}},
		{name: "show", args: []string{"task", "show", "t1"},
			stdout: "task t1: add a /healthz endpoint\nstate: running   session: s1\nprofile: prof-go (version 3)   model: claude-sonnet-4-5\n" +
				"started by: automation run run-9\ncreated: 2026-11-30 05:00:00 (1h ago)   updated: 2026-11-30 05:58:30 (1m ago)\n" +
				"tokens: 25,089 in (20,000 cache read, 3,000 cache write), 1,250 out   cost: $0.12 (+1 not priced)\n\n" + t1Conversation},
		{name: "show with an error", args: []string{"t", "show", "t3"},
			stdout: "task t3: fix typos\nstate: idle   session: s3\nerror: auth: key refused\nprofile: prof-docs (version 0)   model: -\nstarted by: token alice-cli\ncreated: -   updated: 2026-11-27 06:00:00 (3d ago)\ntokens: 0 in, 0 out   cost: -\n\n" +
				"06:00:01 > fix typos\n06:00:02   [claude-code 2.1.0, model sonnet]\n06:00:03 ! auth error: key refused\n06:00:04   [done]\n"},
		{name: "show json", args: []string{"task", "show", "--json", "t3"},
			contains: []string{"\"id\": \"t3\"", "\"events\": [\n", "\"seq\": 3,\n      \"type\": \"error\",\n      \"data\": {\n        \"kind\": \"auth\""}},
		{name: "show without events", args: []string{"task", "show", "t2"},
			stdout: "task t2: rename every occurrence of the old module path across the repository\nstate: stopped   session: -\nprofile: prof-go (version 0)   model: -\nstarted by: a user (API, CLI or dashboard)\ncreated: -   updated: 2026-11-30 03:00:00 (3h ago)\ntokens: 0 in, 0 out   cost: -\n\n"},
		{name: "show unknown", args: []string{"task", "show", "nope"}, code: 1,
			errContain: []string{"error: show task: task nope not found (HTTP 404 not_found)\nhint: list tasks with `engrams task list`\n"}},
		{name: "show follow: every turn of the backlog, then until the latest prompt is answered", args: []string{"task", "show", "--follow", "t4"},
			stdout: "task t4: two turns\nstate: running   session: s4\nprofile: prof-docs (version 0)   model: -\nstarted by: a user (API, CLI or dashboard)\ncreated: -   updated: 2026-11-30 05:59:55 (5s ago)\ntokens: 0 in, 0 out   cost: -\n\n" +
				"06:00:01   [session s4]\n06:00:02 > first\n06:00:03   [shell 1, model m]\n06:00:04   [done]\n" +
				"06:00:05 > second\n06:00:06   [shell 1, model m]\n06:00:07   working on the second\n06:00:08   [usage] 1 in, 2 out tokens, not priced\n06:00:09   [done]\n"},
		{name: "show follow of an answered task", args: []string{"task", "show", "-f", "t3"},
			contains: []string{"06:00:04   [done]\n"}},
		{name: "send follow json", args: []string{"task", "send", "-f", "--json", "t5", "then this"},
			stdout: `{"seq":5,"type":"prompt","data":{"turn":"u2","text":"then this"},"time":"2026-11-30T06:00:05Z"}` + "\n" +
				`{"seq":6,"type":"assistant_text","data":{"text":"first answer","turn":"u1"},"time":"2026-11-30T06:00:06Z"}` + "\n" +
				`{"seq":7,"type":"idle","data":{"turn":"u1"},"time":"2026-11-30T06:00:07Z"}` + "\n" +
				`{"seq":8,"type":"run_started","data":{"harness":"shell","version":"1","model":"m","turn":"u2"},"time":"2026-11-30T06:00:08Z"}` + "\n" +
				`{"seq":9,"type":"assistant_text","data":{"text":"second answer","turn":"u2"},"time":"2026-11-30T06:00:09Z"}` + "\n" +
				`{"seq":10,"type":"idle","data":{"turn":"u2"},"time":"2026-11-30T06:00:10Z"}` + "\n"},
		{name: "send", args: []string{"task", "send", "t1", "now add a test"}, stdout: "sent (event 17)\n"},
		{name: "send json", args: []string{"task", "send", "--json", "t1", "now"}, contains: []string{`"seq": 17`, `"type": "prompt"`, `"text": "now"`}},
		{name: "send follow: until this prompt is answered, not the turn before it", args: []string{"task", "send", "-f", "t5", "then this"},
			stdout: "06:00:05 > then this\n06:00:06   first answer\n06:00:07   [done]\n06:00:08   [shell 1, model m]\n06:00:09   second answer\n06:00:10   [done]\n"},
		{name: "send to a stopped task", args: []string{"task", "send", "t2", "more"}, code: 1,
			errContain: []string{"error: send to task: not active: task t2 is stopped (HTTP 409 conflict)\n",
				"hint: the task is not in a state that allows this; check it with `engrams task get ID`\n"}},
		{name: "send without text", args: []string{"task", "send", "t1"}, code: 2, errContain: []string{"accepts 2 arg(s), received 1", "hint: see `engrams task send --help`"}},
		{name: "start", args: []string{"task", "start", "--profile", "go", "add x\nand y"}, stdout: "t9\n", stderr: startGrants},
		{name: "start json", args: []string{"task", "start", "-p", "go", "--title", "my title", "--json", "add x"},
			contains: []string{`"id": "t9"`, `"title": "my title"`, `"profile_id": "prof-go"`, `"state": "starting"`}},
		{name: "start follow", args: []string{"task", "start", "-p", "go", "-f", "do it"},
			stdout: "t9\n06:00:01   [session s9]\n06:00:02 > do it\n06:00:03   [shell 1, model m]\n06:00:04   done it\n06:00:05   [done]\n", stderr: startGrants},
		{name: "start without a profile", args: []string{"task", "start", "do it"}, code: 2,
			errContain: []string{`required flag(s) "profile" not set`, "hint: see `engrams task start --help`"}},
		{name: "start without a prompt", args: []string{"task", "start", "--profile", "go"}, code: 2, errContain: []string{"accepts 1 arg(s), received 0"}},
		{name: "start from an unknown profile", args: []string{"task", "start", "-p", "nope", "x"}, code: 1,
			errContain: []string{"error: start task: profile \"nope\": not found (HTTP 404 not_found)\n"}},
		{name: "diff", args: []string{"task", "diff", "t1"},
			stdout: "diff --git a/app/main.go b/app/main.go\nindex 1..2 100644\n--- a/app/main.go\n+++ b/app/main.go\n@@ -1 +1 @@\n-a\n+b\n" +
				"diff --git a/web/x.txt b/web/x.txt\nnew file mode 100644\n--- /dev/null\n+++ b/web/x.txt\n@@ -0,0 +1 @@\n+x\n"},
		{name: "diff json", args: []string{"task", "diff", "--json", "t1"}, contains: []string{`"path": "lib"`, `"diff": "diff --git a/main.go b/main.go\n`}},
		{name: "diff without repositories", args: []string{"task", "diff", "t3"}, stdout: "", stderr: "the task cloned no repositories\n"},
		{name: "stop", args: []string{"task", "stop", "t1"}, stdout: "task t1 stopped\n"},
		{name: "stop unknown", args: []string{"task", "stop", "nope"}, code: 1, errContain: []string{"hint: list tasks with `engrams task list`"}},
		{name: "files lists a directory", args: []string{"task", "files", "t1", "app"}, stdout: "-rw-r--r--  13  main.go\ndrwxr-xr-x  0   cmd/\n"},
		{name: "files work root", args: []string{"task", "files", "t1"}, stdout: "-rw-r--r--  13  main.go\ndrwxr-xr-x  0   cmd/\n"},
		{name: "files prints a file", args: []string{"task", "files", "t1", "app/main.go"}, stdout: "package main\n"},
		{name: "files json listing", args: []string{"task", "files", "--json", "t1", "app"}, contains: []string{`"name":"main.go"`}},
		{name: "files above the work root", args: []string{"task", "files", "t1", "../etc"}, code: 1, errContain: []string{"path must stay inside"}},
		{name: "group help", args: []string{"task"}, contains: []string{"Available Commands:", "start", "diff"}},
	})
}
