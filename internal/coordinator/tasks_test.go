package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

var taskT0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// guestExec plays the hosts of a task test: every machine's guest answers
// exec requests with answer (default: exit 0, no output) and each request
// is recorded.
type guestExec struct {
	mu     sync.Mutex
	calls  []guestCall
	answer func(req guestapi.ExecRequest) []guestapi.StreamFrame
}

type guestCall struct {
	HostID, Path string
	Req          guestapi.ExecRequest
}

func (g *guestExec) Transport(_ context.Context, hostID string) (http.RoundTripper, error) {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		var req guestapi.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.calls = append(g.calls, guestCall{HostID: hostID, Path: r.URL.Path, Req: req})
		answer := g.answer
		g.mu.Unlock()
		frames := []guestapi.StreamFrame{{Type: "exit"}}
		if answer != nil {
			frames = answer(req)
		}
		rec := httptest.NewRecorder()
		for _, f := range frames {
			_ = json.NewEncoder(rec).Encode(f)
		}
		return rec.Result(), nil
	}), nil
}

func (g *guestExec) got() []guestCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]guestCall(nil), g.calls...)
}

// taskEnv is a coordinator over SQLite whose loops do not run, with a
// settable clock; tests write its session and task rows directly.
type taskEnv struct {
	st    store.Store
	co    *Coordinator
	guest *guestExec

	mu  sync.Mutex
	now time.Time
}

func newTaskEnv(t *testing.T) *taskEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &taskEnv{st: st, guest: &guestExec{}, now: taskT0}
	e.co, err = New(Config{ReplicaID: "r1", HarnessWorkDir: t.TempDir()},
		Deps{Store: st, Hosts: e.guest, Secrets: sealer{}, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	// What Run does when it returns: background task work ends before the
	// store closes (cleanups run last in, first out).
	t.Cleanup(func() { e.co.bgCancel(); e.co.tasksWG.Wait() })
	return e
}

func (e *taskEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *taskEnv) advance(d time.Duration) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
	return e.now
}

// session writes session id in state want (Created, Active, Suspending,
// HostLost or Dead), placed on hostID when it got that far, at epoch 1
// once claimed. Its create op is finished, so nothing is in flight.
func (e *taskEnv) session(t *testing.T, id, hostID string, want lifecycle.State, spec hostlink.MachineSpec) store.Session {
	t.Helper()
	ctx := context.Background()
	raw, _ := json.Marshal(spec)
	s, _, _, err := e.st.CreateSession(ctx, store.NewSession{ID: id, Spec: raw, OpID: "op-" + id, At: e.clock()})
	if err != nil {
		t.Fatal(err)
	}
	if want == lifecycle.Created {
		return s
	}
	op, _, err := e.st.ClaimOp(ctx, "r1", e.clock(), time.Hour)
	if err != nil || op.SessionID != id {
		t.Fatalf("claim the create op of %s: %+v %v", id, op, err)
	}
	step := func(from, to lifecycle.State, ev lifecycle.Event, host *string) {
		t.Helper()
		if s, err = e.st.ApplyTransition(ctx, store.Transition{SessionID: id, Epoch: op.Epoch, From: from, To: to, Event: ev,
			HostID: host, At: e.clock()}); err != nil {
			t.Fatalf("session %s %s -> %s: %v", id, from, to, err)
		}
	}
	result := store.OpSucceeded
	switch want {
	case lifecycle.Dead:
		step(lifecycle.Created, lifecycle.Dead, lifecycle.Unplaceable, nil)
		result = store.OpFailed
	case lifecycle.Active, lifecycle.Suspending, lifecycle.HostLost:
		step(lifecycle.Created, lifecycle.Starting, lifecycle.Place, &hostID)
		step(lifecycle.Starting, lifecycle.Active, lifecycle.Started, nil)
	default:
		t.Fatalf("session helper cannot make state %s", want)
	}
	if err := e.st.FinishOp(ctx, op.ID, op.Epoch, result, "", e.clock()); err != nil {
		t.Fatal(err)
	}
	switch want {
	case lifecycle.Suspending:
		step(lifecycle.Active, lifecycle.Suspending, lifecycle.SuspendRequested, nil)
	case lifecycle.HostLost:
		step(lifecycle.Active, lifecycle.HostLost, lifecycle.HeartbeatLost, nil)
	}
	return s
}

// taskSpecFixture is the profile spec the test tasks run with: one
// repository, so the harness works in /work/app.
var taskSpecFixture = apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Model: "sonnet", Mode: "plan",
	Credentials: []string{"ant"}, Repos: []apiv1.ProfileRepo{{URL: "https://github.com/acme/app.git", Path: "app"}}}

// task writes a task of profile "rev" in state (with errMsg) working in
// sessionID ("" for none).
func (e *taskEnv) task(t *testing.T, id, sessionID string, state store.TaskState, errMsg string) store.Task {
	t.Helper()
	ctx := context.Background()
	p, err := e.st.GetProfileByName(ctx, "rev")
	if errors.Is(err, store.ErrNotFound) {
		spec, _ := json.Marshal(taskSpecFixture)
		p, err = e.st.CreateProfile(ctx, store.Profile{ID: "prof-rev", Name: "rev", Spec: spec, CreatedAt: e.clock()})
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(taskRecord{Spec: taskSpecFixture, Receipt: apiv1.Receipt{Model: "sonnet"}})
	tk, err := e.st.CreateTask(ctx, store.Task{ID: id, ProfileID: p.ID, ProfileVersion: p.Version, Receipt: rec, Title: "title of " + id,
		SessionID: sessionID, CreatedAt: e.clock()})
	if err != nil {
		t.Fatal(err)
	}
	if state != "" && state != store.TaskStarting {
		if err := e.st.SetTaskState(ctx, id, state, errMsg, e.clock()); err != nil {
			t.Fatal(err)
		}
		tk.State, tk.Error = state, errMsg
	}
	return tk
}

func (e *taskEnv) events(t *testing.T, taskID string) []store.TaskEvent {
	t.Helper()
	evs, err := e.st.ListTaskEvents(context.Background(), taskID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (e *taskEnv) getTask(t *testing.T, id string) store.Task {
	t.Helper()
	tk, err := e.st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// summary is "type:payload" of each event.
func summary(evs []store.TaskEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type + ":" + string(e.Payload)
	}
	return out
}

func TestCheckPrompt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		wantErr    string // "" = accepted
	}{
		{"text", "add a /healthz endpoint", ""},
		{"several lines", "fix it\n\nthen test it\n", ""},
		{"unicode", "füge einen Test hinzu ✓", ""},
		{"at the limit", strings.Repeat("x", maxPromptBytes), ""},
		{"empty", "", "the prompt is empty"},
		{"only spaces", " \n\t ", "the prompt is empty"},
		{"too long", strings.Repeat("x", maxPromptBytes+1), fmt.Sprintf("the prompt has %d bytes, more than %d", maxPromptBytes+1, maxPromptBytes)},
		{"NUL", "a\x00b", "UTF-8 text without NUL bytes"},
		{"invalid UTF-8", "caf\xe9", "UTF-8 text without NUL bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkPrompt(tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrInvalid saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestTitleOf(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, prompt, want string }{
		{"one line", "fix the typo", "fix the typo"},
		{"first line", "add a test\nfor the parser\n", "add a test"},
		{"leading blank lines and spaces", "\n\n   refactor main  \nrest", "refactor main"},
		{"CRLF line ends", "fix it\r\nthen test", "fix it"},
		{"empty", "", ""},
		{"80 runes stay", strings.Repeat("a", 80), strings.Repeat("a", 80)},
		{"81 runes are cut to 80", strings.Repeat("a", 81), strings.Repeat("a", 79) + "…"},
		{"multi-byte runes are cut whole", strings.Repeat("é", 100) + "\nx", strings.Repeat("é", 79) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := titleOf(tt.prompt); got != tt.want {
				t.Errorf("titleOf(%q) = %q, want %q", tt.prompt, got, tt.want)
			}
		})
	}
}

func tev(typ, payload string) store.TaskEvent {
	return store.TaskEvent{Type: typ, Payload: json.RawMessage(payload)}
}

func TestTaskStateAfter(t *testing.T) {
	t.Parallel()
	var (
		run      = tev(guestapi.EventRunStarted, `{"harness":"claude-code","version":"2.1.0"}`)
		text     = tev(guestapi.EventAssistantText, `{"text":"done"}`)
		idle     = tev(guestapi.EventIdle, `{}`)
		authErr  = tev(guestapi.EventError, `{"kind":"auth","message":"key refused"}`)
		modelErr = tev(guestapi.EventError, `{"kind":"model","message":"overloaded"}`)
	)
	const authMsg = "auth: key refused"
	type tc struct {
		name      string
		state     store.TaskState
		err       string
		evs       []store.TaskEvent
		wantState store.TaskState
		wantErr   string
		wantOK    bool
	}
	tests := []tc{
		// One event of each kind that moves the state, in every task state.
		{"starting, run_started", store.TaskStarting, "", []store.TaskEvent{run}, store.TaskRunning, "", true},
		{"running, run_started", store.TaskRunning, "", []store.TaskEvent{run}, store.TaskRunning, "", false},
		{"idle, run_started clears the error", store.TaskIdle, "model: overloaded", []store.TaskEvent{run}, store.TaskRunning, "", true},
		{"stopped, run_started", store.TaskStopped, "", []store.TaskEvent{run}, store.TaskStopped, "", false},
		{"failed, run_started", store.TaskFailed, "clone failed", []store.TaskEvent{run}, store.TaskFailed, "clone failed", false},
		{"starting, idle", store.TaskStarting, "", []store.TaskEvent{idle}, store.TaskIdle, "", true},
		{"running, idle", store.TaskRunning, "", []store.TaskEvent{idle}, store.TaskIdle, "", true},
		{"idle, a lone idle keeps the last turn's error", store.TaskIdle, authMsg, []store.TaskEvent{idle}, store.TaskIdle, authMsg, false},
		{"idle, a lone idle", store.TaskIdle, "", []store.TaskEvent{idle}, store.TaskIdle, "", false},
		{"stopped, idle", store.TaskStopped, "", []store.TaskEvent{idle}, store.TaskStopped, "", false},
		{"failed, idle", store.TaskFailed, "clone failed", []store.TaskEvent{idle}, store.TaskFailed, "clone failed", false},
		{"starting, error", store.TaskStarting, "", []store.TaskEvent{authErr}, store.TaskStarting, authMsg, true},
		{"running, error shows at once", store.TaskRunning, "", []store.TaskEvent{authErr}, store.TaskRunning, authMsg, true},
		{"idle, error", store.TaskIdle, "model: overloaded", []store.TaskEvent{authErr}, store.TaskIdle, authMsg, true},
		{"stopped, error", store.TaskStopped, "", []store.TaskEvent{authErr}, store.TaskStopped, "", false},
		{"failed, error", store.TaskFailed, "clone failed", []store.TaskEvent{authErr}, store.TaskFailed, "clone failed", false},

		// Batches.
		{"no events", store.TaskRunning, "", nil, store.TaskRunning, "", false},
		{"error then idle keeps kind: message", store.TaskRunning, "", []store.TaskEvent{authErr, idle}, store.TaskIdle, authMsg, true},
		{"a whole failed turn", store.TaskIdle, "", []store.TaskEvent{run, text, authErr, idle}, store.TaskIdle, authMsg, true},
		{"a whole successful turn clears the last error", store.TaskIdle, authMsg, []store.TaskEvent{run, text, idle}, store.TaskIdle, "", true},
		{"the last error of a turn wins", store.TaskRunning, "", []store.TaskEvent{authErr, modelErr, idle}, store.TaskIdle, "model: overloaded", true},
		{"a later turn's run_started drops an earlier turn's error", store.TaskRunning, "", []store.TaskEvent{authErr, idle, run, idle}, store.TaskIdle, "", true},
		{"a turn's error from an earlier batch survives its idle", store.TaskRunning, authMsg, []store.TaskEvent{text, idle}, store.TaskIdle, authMsg, true},
		{"a failed first turn without a run", store.TaskStarting, "", []store.TaskEvent{tev(guestapi.EventError, `{"kind":"bad_prompt","message":"empty"}`), idle},
			store.TaskIdle, "bad_prompt: empty", true},
		{"stopped takes a whole turn unchanged", store.TaskStopped, "", []store.TaskEvent{run, authErr, idle}, store.TaskStopped, "", false},
		{"failed takes a whole turn unchanged", store.TaskFailed, "x", []store.TaskEvent{run, idle}, store.TaskFailed, "x", false},
	}
	// Every other event type changes nothing, in every state.
	for _, typ := range []string{guestapi.EventAssistantText, guestapi.EventToolCall, guestapi.EventToolResult, guestapi.EventFileChanged,
		guestapi.EventUsage, guestapi.EventQuestion, TaskEventPrompt, TaskEventSession, TaskEventRepoCloned, TaskEventStopped,
		TaskEventSetupFailed, "something_new"} {
		for _, st := range []store.TaskState{store.TaskStarting, store.TaskRunning, store.TaskIdle, store.TaskStopped, store.TaskFailed} {
			msg := ""
			if st == store.TaskIdle || st == store.TaskFailed {
				msg = "model: overloaded"
			}
			tests = append(tests, tc{fmt.Sprintf("%s, %s", st, typ), st, msg, []store.TaskEvent{tev(typ, `{"text":"x"}`)}, st, msg, false})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, msg, ok := taskStateAfter(store.Task{ID: "t", State: tt.state, Error: tt.err}, tt.evs)
			if st != tt.wantState || msg != tt.wantErr || ok != tt.wantOK {
				t.Errorf("taskStateAfter(%s %q) = %s %q %v, want %s %q %v", tt.state, tt.err, st, msg, ok, tt.wantState, tt.wantErr, tt.wantOK)
			}
		})
	}
}

func TestHarnessPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, turn, data string
		want             string // "" = no payload
	}{
		{"no turn keeps the data", "", `{"text":"hi"}`, `{"text":"hi"}`},
		{"no turn, no data", "", "", ""},
		{"turn merged into an object", "t1", `{"text":"hi","n":2}`, `{"n":2,"text":"hi","turn":"t1"}`},
		{"turn without data", "t1", "", `{"turn":"t1"}`},
		{"turn with an empty object", "t1", `{}`, `{"turn":"t1"}`},
		{"the event's turn wins over the data's", "t1", `{"turn":"other"}`, `{"turn":"t1"}`},
		{"a string is kept under data", "t1", `"just text"`, `{"data":"just text","turn":"t1"}`},
		{"an array is kept under data", "t1", `[1,2]`, `{"data":[1,2],"turn":"t1"}`},
		{"a number is kept under data", "t1", `42`, `{"data":42,"turn":"t1"}`},
		{"null is kept under data", "t1", `null`, `{"data":null,"turn":"t1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := guestapi.HarnessEvent{Seq: 1, Type: guestapi.EventAssistantText, Turn: tt.turn}
			if tt.data != "" {
				e.Data = json.RawMessage(tt.data)
			}
			if got := string(harnessPayload(e)); got != tt.want {
				t.Errorf("payload = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestGuestTaskEvent(t *testing.T) {
	t.Parallel()
	now := taskT0
	big := `{"text":"` + strings.Repeat("x", maxHarnessEventData) + `"}`
	tests := []struct {
		name      string
		e         guestapi.HarnessEvent
		wantType  string
		wantData  string
		wantAt    time.Time
		wantGuest int64
	}{
		{"a harness event", guestapi.HarnessEvent{Seq: 4, Type: guestapi.EventToolResult, Turn: "u", At: now.Add(-time.Hour), Data: json.RawMessage(`{"id":"c","output":"ok"}`)},
			guestapi.EventToolResult, `{"id":"c","output":"ok","turn":"u"}`, now.Add(-time.Hour), 4},
		{"the coordinator's prompt", guestapi.HarnessEvent{Seq: 1, Type: TaskEventPrompt, Turn: "u", At: now, Data: json.RawMessage(`{"text":"rm -rf /"}`)},
			guestapi.EventError, `{"kind":"harness","message":"the session sent an event of unknown type \"prompt\"","turn":"u"}`, now, 1},
		{"the coordinator's repo_cloned", guestapi.HarnessEvent{Seq: 2, Type: TaskEventRepoCloned, At: now},
			guestapi.EventError, `{"kind":"harness","message":"the session sent an event of unknown type \"repo_cloned\"","turn":""}`, now, 2},
		{"a long unknown type is cut", guestapi.HarnessEvent{Seq: 3, Type: strings.Repeat("ü", 100), At: now},
			guestapi.EventError, `{"kind":"harness","message":"the session sent an event of unknown type \"` + strings.Repeat("ü", 64) + `\"","turn":""}`, now, 3},
		{"data over the limit", guestapi.HarnessEvent{Seq: 5, Type: guestapi.EventAssistantText, Turn: "u", At: now, Data: json.RawMessage(big)},
			guestapi.EventAssistantText, fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":"u"}`, len(big)+len(`,"turn":"u"`)), now, 5},
		{"data at the limit", guestapi.HarnessEvent{Seq: 5, Type: guestapi.EventAssistantText, At: now, Data: json.RawMessage(big[:maxHarnessEventData-2] + `"}`)},
			guestapi.EventAssistantText, big[:maxHarnessEventData-2] + `"}`, now, 5},
		{"a time in the future is now", guestapi.HarnessEvent{Seq: 6, Type: guestapi.EventIdle, At: now.Add(2 * time.Minute)},
			guestapi.EventIdle, "", now, 6},
		{"a little clock skew is kept", guestapi.HarnessEvent{Seq: 7, Type: guestapi.EventIdle, At: now.Add(30 * time.Second)},
			guestapi.EventIdle, "", now.Add(30 * time.Second), 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := guestTaskEvent(tt.e, now)
			if got.Type != tt.wantType || string(got.Payload) != tt.wantData || !got.At.Equal(tt.wantAt) || got.GuestSeq != tt.wantGuest {
				data := string(got.Payload)
				if len(data) > 200 {
					data = data[:200] + "..."
				}
				t.Errorf("stored %s %s at %s guest seq %d, want %s %s at %s %d", got.Type, data, got.At, got.GuestSeq,
					tt.wantType, tt.wantData, tt.wantAt, tt.wantGuest)
			}
		})
	}
}

// hevs are harness events seq from..to of type typ with data {"n":seq}
// and, under turn "u", what tag says.
func hevs(typ, tag string, from, to int64) []guestapi.HarnessEvent {
	var out []guestapi.HarnessEvent
	for s := from; s <= to; s++ {
		out = append(out, guestapi.HarnessEvent{Seq: s, Type: typ, Turn: "u", At: taskT0,
			Data: json.RawMessage(fmt.Sprintf(`{"text":"%s%d"}`, tag, s))})
	}
	return out
}

func hev(seq int64, typ, data string) guestapi.HarnessEvent {
	return guestapi.HarnessEvent{Seq: seq, Type: typ, At: taskT0, Data: json.RawMessage(data)}
}

// postEvents posts a batch to the host-link handler as host hostID would.
func postEvents(t *testing.T, h http.Handler, hostID, sid string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req := httptest.NewRequest(http.MethodPost, strings.Replace(hostlink.PathHarnessEvents, "{id}", sid, 1), strings.NewReader(string(raw)))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestIngestHarnessEvents(t *testing.T) {
	t.Parallel()
	type post struct {
		host    string // default host-a
		sid     string // default s1
		epoch   *int64 // default the session's
		rewound *int64
		events  []guestapi.HarnessEvent
		status  int   // default 200
		cursor  int64 // when 200
		code    string
	}
	tests := []struct {
		name      string
		state     lifecycle.State // of session s1 (on host-a); default Active
		noTask    bool            // s1 belongs to no task
		posts     []post
		wantTexts []string // the text of each task event, in order
		wantState store.TaskState
		wantErr   string
	}{
		{name: "cursor of a fresh task", posts: []post{{cursor: 0}}, wantState: store.TaskStarting},
		{name: "appended in order, with their turn",
			posts:     []post{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {cursor: 3}},
			wantTexts: []string{"a1", "a2", "a3"}, wantState: store.TaskStarting},
		{name: "re-sent events are appended once",
			posts: []post{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {events: hevs(guestapi.EventAssistantText, "b", 1, 3), cursor: 3},
				{events: hevs(guestapi.EventAssistantText, "c", 2, 5), cursor: 5}},
			wantTexts: []string{"a1", "a2", "a3", "c4", "c5"}, wantState: store.TaskStarting},
		{name: "rewound_to lowers the cursor; the lost state's events stay",
			posts: []post{{events: hevs(guestapi.EventAssistantText, "a", 1, 4), cursor: 4}, {rewound: ptr[int64](2), cursor: 2},
				{events: hevs(guestapi.EventAssistantText, "b", 1, 4), cursor: 4}},
			wantTexts: []string{"a1", "a2", "a3", "a4", "b3", "b4"}, wantState: store.TaskStarting},
		{name: "rewound_to with the batch that follows it",
			posts: []post{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3},
				{rewound: ptr[int64](1), events: hevs(guestapi.EventAssistantText, "b", 2, 2), cursor: 2}},
			wantTexts: []string{"a1", "a2", "a3", "b2"}, wantState: store.TaskStarting},
		{name: "rewound_to above the cursor is ignored",
			posts:     []post{{events: hevs(guestapi.EventAssistantText, "a", 1, 2), cursor: 2}, {rewound: ptr[int64](9), cursor: 2}},
			wantTexts: []string{"a1", "a2"}, wantState: store.TaskStarting},
		{name: "run_started makes the task running",
			posts:     []post{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`)}, cursor: 1}},
			wantTexts: []string{"r"}, wantState: store.TaskRunning},
		{name: "idle makes it idle",
			posts: []post{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`)}, cursor: 1},
				{events: []guestapi.HarnessEvent{hev(2, guestapi.EventAssistantText, `{"text":"t"}`), hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "t", "i"}, wantState: store.TaskIdle},
		{name: "an error and its idle in one batch",
			posts: []post{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`),
				hev(2, guestapi.EventError, `{"kind":"auth","message":"key refused","text":"e"}`), hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "e", "i"}, wantState: store.TaskIdle, wantErr: "auth: key refused"},
		{name: "an error and its idle in two batches",
			posts: []post{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`),
				hev(2, guestapi.EventError, `{"kind":"auth","message":"key refused","text":"e"}`)}, cursor: 2},
				{events: []guestapi.HarnessEvent{hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "e", "i"}, wantState: store.TaskIdle, wantErr: "auth: key refused"},
		{name: "refused for an older epoch", posts: []post{{epoch: ptr[int64](0), events: hevs(guestapi.EventUsage, "u", 1, 1), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: store.TaskStarting},
		{name: "a suspending session's events are taken", state: lifecycle.Suspending,
			posts: []post{{events: hevs(guestapi.EventUsage, "u", 1, 1), cursor: 1}}, wantTexts: []string{"u1"}, wantState: store.TaskStarting},

		{name: "a guest cannot write the coordinator's events",
			posts:     []post{{events: []guestapi.HarnessEvent{hev(1, TaskEventStopped, `{"text":"s"}`), hev(2, guestapi.EventAssistantText, `{"text":"t"}`)}, cursor: 2}},
			wantTexts: []string{"", "t"}, wantState: store.TaskStarting, wantErr: `harness: the session sent an event of unknown type "stopped"`},
		{name: "refused from another host", posts: []post{{host: "host-b", events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: store.TaskStarting},
		{name: "refused for a newer epoch", posts: []post{{epoch: ptr[int64](2), events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: store.TaskStarting},
		{name: "refused when the session has no VM", state: lifecycle.HostLost,
			posts:     []post{{events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: store.TaskStarting},
		{name: "refused for a session not yet placed", state: lifecycle.Created,
			posts:     []post{{events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: store.TaskStarting},
		{name: "unknown session", posts: []post{{sid: "nope", events: hevs(guestapi.EventIdle, "x", 1, 1), status: 404, code: "not_found"}},
			wantState: store.TaskStarting},
		{name: "a session without a task: acknowledged with the last seq", noTask: true,
			posts: []post{{cursor: 0}, {events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {events: hevs(guestapi.EventAssistantText, "a", 7, 9), cursor: 9}}},
		{name: "a session without a task still checks the host", noTask: true,
			posts: []post{{host: "host-b", events: hevs(guestapi.EventAssistantText, "a", 1, 3), status: 409, code: hostlink.CodeStaleEpoch}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			state := tt.state
			if state == "" {
				state = lifecycle.Active
			}
			s := e.session(t, "s1", "host-a", state, hostlink.MachineSpec{})
			if !tt.noTask {
				e.task(t, "t1", "s1", "", "")
			}
			h := e.co.HostHandler()
			for i, p := range tt.posts {
				host, sid, epoch := "host-a", "s1", s.Epoch
				if p.host != "" {
					host = p.host
				}
				if p.sid != "" {
					sid = p.sid
				}
				if p.epoch != nil {
					epoch = *p.epoch
				}
				status := p.status
				if status == 0 {
					status = http.StatusOK
				}
				rec := postEvents(t, h, host, sid, hostlink.HarnessEventsRequest{Epoch: epoch, RewoundTo: p.rewound, Events: p.events})
				if rec.Code != status {
					t.Fatalf("post %d: status %d, want %d: %s", i, rec.Code, status, rec.Body)
				}
				if status == http.StatusOK {
					var resp hostlink.HarnessEventsResponse
					if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Cursor != p.cursor {
						t.Fatalf("post %d: answer %s (%v), want cursor %d", i, rec.Body, err, p.cursor)
					}
					continue
				}
				var eb hostlink.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Code != p.code || eb.Error == "" {
					t.Fatalf("post %d: error body %s (%v), want code %s", i, rec.Body, err, p.code)
				}
			}
			if tt.noTask {
				if ts, err := e.st.ListTasks(context.Background(), store.TaskFilter{}); err != nil || len(ts) != 0 {
					t.Fatalf("tasks %+v %v", ts, err)
				}
				return
			}
			evs := e.events(t, "t1")
			var texts []string
			for i, ev := range evs {
				var d struct{ Text, Turn string }
				_ = json.Unmarshal(ev.Payload, &d)
				texts = append(texts, d.Text)
				if ev.Seq != int64(i+1) || !ev.At.Equal(taskT0) {
					t.Errorf("event %d: seq %d at %s", i, ev.Seq, ev.At)
				}
			}
			if !reflect.DeepEqual(texts, tt.wantTexts) {
				t.Errorf("task events %q, want %q", texts, tt.wantTexts)
			}
			if got := e.getTask(t, "t1"); got.State != tt.wantState || got.Error != tt.wantErr || got.EventSeq != int64(len(evs)) {
				t.Errorf("task %s %q event_seq %d, want %s %q %d", got.State, got.Error, got.EventSeq, tt.wantState, tt.wantErr, len(evs))
			}
		})
	}
}

// TestIngestSideEffects: appended events record session activity, stamp
// the turn into their payload and wake the task's followers; a re-sent
// batch does neither.
func TestIngestSideEffects(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	s := e.session(t, "s1", "host-a", lifecycle.Active, hostlink.MachineSpec{})
	e.task(t, "t1", "s1", "", "")
	h := e.co.HostHandler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := e.st.Subscribe(ctx, taskTopic("t1"))
	batch := hostlink.HarnessEventsRequest{Epoch: s.Epoch, Events: []guestapi.HarnessEvent{
		{Seq: 1, Type: guestapi.EventToolCall, Turn: "turn-9", At: taskT0, Data: json.RawMessage(`{"id":"c1","name":"Bash"}`)}}}

	at := e.advance(time.Minute)
	if rec := postEvents(t, h, "host-a", "s1", batch); rec.Code != http.StatusOK {
		t.Fatalf("post: %d %s", rec.Code, rec.Body)
	}
	select {
	case <-sub:
	default:
		t.Error("the task's followers were not woken")
	}
	if got, _ := e.st.GetSession(context.Background(), "s1"); !got.LastActivity.Equal(at) {
		t.Errorf("last activity %s, want %s", got.LastActivity, at)
	}
	if got := summary(e.events(t, "t1")); !reflect.DeepEqual(got, []string{`tool_call:{"id":"c1","name":"Bash","turn":"turn-9"}`}) {
		t.Errorf("events %q", got)
	}

	e.advance(time.Minute)
	if rec := postEvents(t, h, "host-a", "s1", batch); rec.Code != http.StatusOK {
		t.Fatalf("post again: %d %s", rec.Code, rec.Body)
	}
	select {
	case <-sub:
		t.Error("a re-sent batch woke the followers")
	default:
	}
	if got, _ := e.st.GetSession(context.Background(), "s1"); !got.LastActivity.Equal(at) {
		t.Errorf("a re-sent batch moved last activity to %s", got.LastActivity)
	}
}

func TestIngestRefusesBadBatches(t *testing.T) {
	t.Parallel()
	tooMany := hevs(guestapi.EventUsage, "u", 1, maxHarnessEventBatch+1)
	tests := []struct {
		name, want string
		body       func(epoch int64) any
	}{
		{"not JSON", "decode harness events", func(int64) any { return `{"events":[` }},
		{"an event without a type", "harness event 1 has no type or seq", func(ep int64) any {
			return hostlink.HarnessEventsRequest{Epoch: ep, Events: []guestapi.HarnessEvent{hev(1, guestapi.EventUsage, `{}`), hev(2, "", `{}`)}}
		}},
		{"an event without a seq", "harness event 0 has no type or seq", func(ep int64) any {
			return hostlink.HarnessEventsRequest{Epoch: ep, Events: []guestapi.HarnessEvent{hev(0, guestapi.EventUsage, `{}`)}}
		}},
		{"a negative seq", "harness event 0 has no type or seq", func(ep int64) any {
			return hostlink.HarnessEventsRequest{Epoch: ep, Events: []guestapi.HarnessEvent{hev(-3, guestapi.EventUsage, `{}`)}}
		}},
		{"more than 1000 events", "1001 harness events in one batch, at most 1000", func(ep int64) any {
			return hostlink.HarnessEventsRequest{Epoch: ep, Events: tooMany}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			s := e.session(t, "s1", "host-a", lifecycle.Active, hostlink.MachineSpec{})
			e.task(t, "t1", "s1", "", "")
			rec := postEvents(t, e.co.HostHandler(), "host-a", "s1", tt.body(s.Epoch))
			var eb hostlink.ErrorBody
			_ = json.Unmarshal(rec.Body.Bytes(), &eb)
			if rec.Code != http.StatusBadRequest || eb.Code != "bad_request" || !strings.Contains(eb.Error, tt.want) {
				t.Errorf("answer %d %s, want 400 bad_request saying %q", rec.Code, rec.Body, tt.want)
			}
			if evs := e.events(t, "t1"); len(evs) != 0 {
				t.Errorf("a refused batch appended %q", summary(evs))
			}
			// The batch of 1000 is the limit, not over it.
			if tt.name == "more than 1000 events" {
				rec := postEvents(t, e.co.HostHandler(), "host-a", "s1", hostlink.HarnessEventsRequest{Epoch: s.Epoch, Events: tooMany[:maxHarnessEventBatch]})
				if rec.Code != http.StatusOK || len(e.events(t, "t1")) != maxHarnessEventBatch {
					t.Errorf("a batch of %d: %d %s", maxHarnessEventBatch, rec.Code, rec.Body)
				}
			}
		})
	}
}

// agentTaskEnv is a taskEnv with the images, harnesses and secrets of
// seedAgents, for StartTask.
func agentTaskEnv(t *testing.T) *taskEnv {
	t.Helper()
	e := newTaskEnv(t)
	seedAgents(t, &agentEnv{st: e.st, co: e.co})
	return e
}

func TestStartTask(t *testing.T) {
	t.Parallel()
	e := agentTaskEnv(t)
	ctx := context.Background()
	spec := apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}, Env: map[string]string{"LOG_LEVEL": "debug"},
		Repos: []apiv1.ProfileRepo{{URL: "https://github.com/acme/app.git", Credential: "gh"}}, IdleTimeoutS: 900}
	p, err := e.co.CreateProfile(ctx, "rev", spec)
	if err != nil {
		t.Fatal(err)
	}
	prompt := "  add a /healthz endpoint\nand a test for it"
	tk, err := e.co.StartTask(ctx, StartTaskRequest{Profile: "rev", Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Title != "add a /healthz endpoint" || tk.ProfileID != p.Profile.ID || tk.ProfileVersion != 1 || tk.State != store.TaskStarting || tk.SessionID == "" {
		t.Errorf("task %+v", tk)
	}
	var rec taskRecord
	if err := json.Unmarshal(tk.Receipt, &rec); err != nil || rec.Spec.Repos[0].Path != "app" || rec.Receipt.Image.Name != "py" ||
		rec.Receipt.Harness.Name != "claude-code" || len(rec.Receipt.Credentials) != 2 {
		t.Errorf("receipt %s: %v", tk.Receipt, err)
	}
	// The session: the profile's image, harness, env, idle timeout and
	// model credential; the git login stays with the coordinator.
	s, err := e.st.GetSession(ctx, tk.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := Spec(s)
	ant, _ := e.st.GetSecretByName(ctx, "ant")
	if ms.Image != "py" || ms.Harness == "" || ms.Env["LOG_LEVEL"] != "debug" || ms.IdleTimeoutSec != 900 ||
		!reflect.DeepEqual(ms.Credentials, []hostlink.CredentialGrant{{Kind: "anthropic_api_key", SecretID: ant.ID}}) {
		t.Errorf("session spec %+v", ms)
	}
	if s.IdempotencyKey != "task-"+tk.ID {
		t.Errorf("session idempotency key %q", s.IdempotencyKey)
	}
	evs := e.events(t, tk.ID)
	if len(evs) != 2 || evs[0].Type != TaskEventSession || evs[1].Type != TaskEventPrompt {
		t.Fatalf("events %q", summary(evs))
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	var pr struct{ Turn, Text string }
	_ = json.Unmarshal(evs[0].Payload, &sess)
	_ = json.Unmarshal(evs[1].Payload, &pr)
	if sess.SessionID != s.ID || pr.Text != prompt || pr.Turn == "" {
		t.Errorf("events %q", summary(evs))
	}
	if ss, _ := e.st.ListTaskSessions(ctx, tk.ID); len(ss) != 1 || ss[0].SessionID != s.ID {
		t.Errorf("task sessions %+v", ss)
	}

	// A title given is kept.
	tk2, err := e.co.StartTask(ctx, StartTaskRequest{Profile: p.Profile.ID, Prompt: "x", Title: "my title"})
	if err != nil || tk2.Title != "my title" {
		t.Errorf("start with a title: %+v %v", tk2, err)
	}
}

func TestStartTaskRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		req     StartTaskRequest
		setup   func(t *testing.T, e *taskEnv)
		wantIs  error
		wantMsg string
	}{
		{name: "empty prompt", req: StartTaskRequest{Profile: "rev", Prompt: " "}, wantIs: ErrInvalid, wantMsg: "the prompt is empty"},
		{name: "NUL in the prompt", req: StartTaskRequest{Profile: "rev", Prompt: "a\x00"}, wantIs: ErrInvalid, wantMsg: "without NUL bytes"},
		{name: "no profile", req: StartTaskRequest{Prompt: "go"}, wantIs: ErrInvalid, wantMsg: "a task needs a profile"},
		{name: "unknown profile", req: StartTaskRequest{Profile: "nope", Prompt: "go"}, wantIs: store.ErrNotFound, wantMsg: `profile "nope"`},
		{name: "deleted profile", req: StartTaskRequest{Profile: "rev", Prompt: "go"}, wantIs: store.ErrNotFound, wantMsg: `profile "rev"`,
			setup: func(t *testing.T, e *taskEnv) {
				if _, err := e.co.DeleteProfile(context.Background(), "rev"); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "profile with problems", req: StartTaskRequest{Profile: "rev", Prompt: "go"}, wantIs: ErrInvalid, wantMsg: `no secret "ant"`,
			setup: func(t *testing.T, e *taskEnv) {
				if _, err := e.co.DeleteSecret(context.Background(), "ant"); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := agentTaskEnv(t)
			ctx := context.Background()
			if _, err := e.co.CreateProfile(ctx, "rev", apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}}); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, e)
			}
			_, err := e.co.StartTask(ctx, tt.req)
			if !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want %v saying %q", err, tt.wantIs, tt.wantMsg)
			}
			if ss, _ := e.st.ListSessions(ctx, store.SessionFilter{}); len(ss) != 0 {
				t.Errorf("a refused start created %d sessions", len(ss))
			}
			if ts, _ := e.st.ListTasks(ctx, store.TaskFilter{}); len(ts) != 0 {
				t.Errorf("a refused start recorded %d tasks", len(ts))
			}
		})
	}
}

func TestSendTask(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", lifecycle.Active,
		hostlink.MachineSpec{Credentials: []hostlink.CredentialGrant{{Kind: "anthropic_api_key", SecretID: "sec-1"}}})
	e.task(t, "t1", "s1", store.TaskIdle, "")
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventPrompt, map[string]any{"turn": "first", "text": "hi"})); err != nil {
		t.Fatal(err)
	}
	ops := e.st.Subscribe(ctx, topicOps)
	ev, err := e.co.SendTask(ctx, "t1", "now add a test")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct{ Turn, Text string }
	if err := json.Unmarshal(ev.Payload, &pr); err != nil || ev.Seq != 2 || ev.Type != TaskEventPrompt || pr.Text != "now add a test" || pr.Turn == "" {
		t.Fatalf("event %+v %s", ev, ev.Payload)
	}
	items, err := e.st.ListOutbox(ctx, "s1", 0, 0)
	if err != nil || len(items) != 1 {
		t.Fatalf("outbox %+v %v", items, err)
	}
	var p guestapi.PromptPayload
	if err := json.Unmarshal(items[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	ph, _ := e.co.GatewayPlaceholder(ctx, "s1", "anthropic_api_key")
	want := guestapi.PromptPayload{Turn: pr.Turn, Text: "now add a test", Workdir: "/work/app", Model: "sonnet", Mode: "plan",
		Credentials: map[string]string{"anthropic_api_key": ph}}
	if items[0].ID != "turn-"+pr.Turn || items[0].Kind != guestapi.OutboxPrompt || !reflect.DeepEqual(p, want) {
		t.Errorf("outbox item %s %s %+v, want %+v", items[0].ID, items[0].Kind, p, want)
	}
	<-ops // the session is asked to resume (or take the prompt at once)
}

func TestSendTaskRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		task         store.TaskState
		session      lifecycle.State
		id, text     string
		wantIs       error
		wantContains string
	}{
		{name: "stopped task", task: store.TaskStopped, session: lifecycle.Active, wantIs: ErrNotActive, wantContains: "task t1 is stopped"},
		{name: "failed task", task: store.TaskFailed, session: lifecycle.Active, wantIs: ErrNotActive, wantContains: "task t1 is failed"},
		{name: "starting task", task: store.TaskStarting, session: lifecycle.Active, wantIs: ErrBusy, wantContains: "task t1 is still starting"},
		{name: "unknown task", task: store.TaskIdle, session: lifecycle.Active, id: "nope", wantIs: store.ErrNotFound, wantContains: "get task nope"},
		{name: "empty text", task: store.TaskIdle, session: lifecycle.Active, text: "\n", wantIs: ErrInvalid, wantContains: "the prompt is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			e.session(t, "s1", "host-a", tt.session, hostlink.MachineSpec{})
			e.task(t, "t1", "s1", tt.task, "")
			id, text := "t1", "more"
			if tt.id != "" {
				id = tt.id
			}
			if tt.text != "" {
				text = tt.text
			}
			_, err := e.co.SendTask(context.Background(), id, text)
			if !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantContains) {
				t.Fatalf("err = %v, want %v saying %q", err, tt.wantIs, tt.wantContains)
			}
			if evs := e.events(t, "t1"); len(evs) != 0 {
				t.Errorf("a refused send appended %q", summary(evs))
			}
			if items, _ := e.st.ListOutbox(context.Background(), "s1", 0, 0); len(items) != 0 {
				t.Errorf("a refused send queued %+v", items)
			}
		})
	}
}

func TestStopTask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		session   lifecycle.State
		task      store.TaskState
		interrupt bool // an interrupt is queued for the harness
		suspend   bool // the session is asked to suspend
		events    int  // stopped events afterwards
	}{
		{name: "running in an active session", session: lifecycle.Active, task: store.TaskRunning, interrupt: true, suspend: true, events: 1},
		{name: "idle in a dead session", session: lifecycle.Dead, task: store.TaskIdle, events: 1},
		{name: "failed", session: lifecycle.Dead, task: store.TaskFailed, events: 1},
		{name: "already stopped", session: lifecycle.Active, task: store.TaskStopped, events: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			e.session(t, "s1", "host-a", tt.session, hostlink.MachineSpec{})
			e.task(t, "t1", "s1", tt.task, "")
			for range 2 { // a second stop changes nothing
				tk, err := e.co.StopTask(ctx, "t1")
				if err != nil || tk.State != store.TaskStopped || tk.Error != "" {
					t.Fatalf("stop: %+v %v", tk, err)
				}
			}
			if got := summary(e.events(t, "t1")); len(got) != tt.events || tt.events == 1 && got[0] != `stopped:{"by":"user"}` {
				t.Errorf("events %q, want %d stopped", got, tt.events)
			}
			items, _ := e.st.ListOutbox(ctx, "s1", 0, 0)
			if tt.interrupt != (len(items) == 1 && items[0].ID == "stop-t1" && items[0].Kind == guestapi.OutboxInterrupt) || len(items) > 1 {
				t.Errorf("outbox %+v, want an interrupt: %v", items, tt.interrupt)
			}
			if tt.suspend {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := e.co.WaitSession(wctx, "s1", func(s store.Session) bool { return s.DesiredState == "idle" }); err != nil {
					t.Errorf("the session was not asked to suspend: %v", err)
				}
			}
			if _, err := e.co.StopTask(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("stop an unknown task: %v", err)
			}
		})
	}
}

func TestTaskDiff(t *testing.T) {
	t.Parallel()
	const patch = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	tests := []struct {
		name    string
		repos   []map[string]any // repo_cloned events
		answer  func(req guestapi.ExecRequest) []guestapi.StreamFrame
		want    []RepoDiff
		wantErr string
	}{
		{name: "no repositories", want: []RepoDiff{}},
		{name: "two repositories",
			repos: []map[string]any{{"path": "app", "url": "https://h/app.git", "base": "b1"}, {"path": "lib", "url": "https://h/lib", "ref": "main", "base": "b2"}},
			answer: func(req guestapi.ExecRequest) []guestapi.StreamFrame {
				if req.Argv[len(req.Argv)-2] == "/work/lib" {
					return []guestapi.StreamFrame{{Type: "exit"}} // unchanged
				}
				return []guestapi.StreamFrame{{Type: "stdout", Data: []byte(patch[:20])}, {Type: "stderr", Data: []byte("warning")},
					{Type: "stdout", Data: []byte(patch[20:])}, {Type: "exit"}}
			},
			want: []RepoDiff{{Path: "app", URL: "https://h/app.git", Base: "b1", Diff: patch}, {Path: "lib", URL: "https://h/lib", Base: "b2"}}},
		{name: "git fails", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "stderr", Data: []byte("fatal: bad object b1\n")}, {Type: "exit", ExitCode: 128}}
			},
			wantErr: "diff app: exit 128 : fatal: bad object b1"},
		{name: "the guest cannot run it", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "exit", ExitCode: -1, Error: "timed out"}}
			},
			wantErr: "diff app: exit -1 timed out"},
		{name: "output without an exit", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "stdout", Data: []byte("x")}}
			},
			wantErr: "without an exit frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			e.guest.answer = tt.answer
			e.session(t, "s1", "host-a", lifecycle.Active, hostlink.MachineSpec{})
			e.task(t, "t1", "s1", store.TaskIdle, "")
			for _, r := range tt.repos {
				if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventRepoCloned, r), taskEvent(TaskEventPrompt, map[string]any{"text": "x"})); err != nil {
					t.Fatal(err)
				}
			}
			got, err := e.co.TaskDiff(ctx, "t1")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("diff = %+v, %v; want %+v", got, err, tt.want)
			}
			calls := e.guest.got()
			if len(calls) != len(tt.repos) {
				t.Fatalf("%d guest calls, want %d", len(calls), len(tt.repos))
			}
			for i, c := range calls {
				argv := c.Req.Argv
				if c.HostID != "host-a" || c.Path != "/v1/machines/s1/guest"+guestapi.PathExecRun || len(argv) != 6 || argv[0] != "/bin/sh" ||
					argv[4] != "/work/"+tt.repos[i]["path"].(string) || argv[5] != tt.repos[i]["base"] || !strings.Contains(argv[2], "GIT_INDEX_FILE") {
					t.Errorf("guest call %d: %+v", i, c)
				}
			}
		})
	}
	e := newTaskEnv(t)
	if _, err := e.co.TaskDiff(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("diff of an unknown task: %v", err)
	}
}

func TestTaskSession(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	e.task(t, "t1", "s1", store.TaskIdle, "")
	e.task(t, "t2", "", store.TaskStarting, "")
	if tk, err := e.co.TaskSession(context.Background(), "t1"); err != nil || tk.SessionID != "s1" {
		t.Errorf("t1: %+v %v", tk, err)
	}
	if _, err := e.co.TaskSession(context.Background(), "t2"); !errors.Is(err, ErrNotActive) {
		t.Errorf("t2 without a session: %v", err)
	}
	if _, err := e.co.TaskSession(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
}
