package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/gateway"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/profiles"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
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

func (g *guestExec) Transport(_ context.Context, hostID domain.HostID) (http.RoundTripper, error) {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		var req guestapi.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.calls = append(g.calls, guestCall{HostID: string(hostID), Path: r.URL.Path, Req: req})
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
// settable clock, and the task service with the profiles, gateway and
// vault it uses; tests write its session and task rows directly.
type taskEnv struct {
	st       store.Store
	reads    *boundedReads // the store as the task service sees it
	co       *Tasks
	sessions *coordinator.Coordinator
	profiles *profiles.Profiles
	vault    *secrets.Vault
	gw       *gateway.Gateway
	guest    *guestExec

	mu  sync.Mutex
	now time.Time
}

// noHosts is a fleet without hosts for the image service (never reached).
type noHosts struct{}

func (noHosts) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, errors.New("no hosts in this test")
}

func newTaskEnv(t *testing.T) *taskEnv { t.Helper(); return newTaskEnvWith(t, Config{}, nil) }

// newTaskEnvWith is newTaskEnv whose task service has cfg and records
// metrics in m (nil: none).
func newTaskEnvWith(t *testing.T, cfg Config, m Metrics) *taskEnv {
	t.Helper()
	st := coordinatortest.NewStore(t)
	e := &taskEnv{st: st, guest: &guestExec{}, now: taskT0}
	im, err := imagejobs.New(imagejobs.Config{}, imagejobs.Deps{Store: st, Hosts: noHosts{}, Place: coordinator.NewPlacement(st, 0, e.clock), Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := harnessreg.New(harnessreg.Config{}, harnessreg.Deps{Store: st, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.sessions, err = coordinator.New(coordinator.Config{ReplicaID: "r1"},
		coordinator.Deps{Store: st, Hosts: e.guest, Images: im, Harnesses: reg, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if e.vault, err = secrets.New(secrets.Deps{Store: st, Sealer: coordinatortest.Sealer{}, Now: e.clock}); err != nil {
		t.Fatal(err)
	}
	if e.profiles, err = profiles.New(profiles.Deps{Store: st, Images: im, Now: e.clock}); err != nil {
		t.Fatal(err)
	}
	if e.gw, err = gateway.New(gateway.Config{}, gateway.Deps{Store: st, Secrets: e.vault, Sealer: coordinatortest.Sealer{}, Now: e.clock}); err != nil {
		t.Fatal(err)
	}
	e.reads = &boundedReads{Store: st, t: t}
	e.co, err = New(cfg, Deps{Store: e.reads, Sessions: e.sessions, Profiles: e.profiles, Placeholders: e.gw, Secrets: e.vault, Now: e.clock, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	// What Run does when it returns: background task work ends before the
	// store closes (cleanups run last in, first out).
	t.Cleanup(func() { e.co.bgCancel(); e.co.tasksWG.Wait() })
	return e
}

// hostLink is the task service's host-link handler (harness events).
func (e *taskEnv) hostLink() http.Handler {
	mux := http.NewServeMux()
	e.co.RouteHostLink(mux)
	return mux
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
func (e *taskEnv) session(t *testing.T, id domain.SessionID, hostID domain.HostID, want domain.SessionState, spec domain.SessionSpec) domain.Session {
	t.Helper()
	ctx := context.Background()
	s, _, _, err := e.st.CreateSession(ctx, store.NewSession{ID: id, Spec: spec, OpID: "op-" + string(id), At: e.clock()})
	if err != nil {
		t.Fatal(err)
	}
	if want == domain.SessionCreated {
		return s
	}
	op, _, err := e.st.ClaimOp(ctx, "r1", e.clock(), time.Hour)
	if err != nil || op.SessionID != id {
		t.Fatalf("claim the create op of %s: %+v %v", id, op, err)
	}
	step := func(from, to domain.SessionState, ev lifecycle.Event, host *domain.HostID) {
		t.Helper()
		if s, err = e.st.ApplyTransition(ctx, store.Transition{SessionID: id, Epoch: op.Epoch, From: from, To: to, Event: ev,
			HostID: host, At: e.clock()}); err != nil {
			t.Fatalf("session %s %s -> %s: %v", id, from, to, err)
		}
	}
	result := domain.OpSucceeded
	switch want {
	case domain.SessionDead:
		step(domain.SessionCreated, domain.SessionDead, lifecycle.Unplaceable, nil)
		result = domain.OpFailed
	case domain.SessionActive, domain.SessionSuspending, domain.SessionHostLost:
		step(domain.SessionCreated, domain.SessionStarting, lifecycle.Place, &hostID)
		step(domain.SessionStarting, domain.SessionActive, lifecycle.Started, nil)
	default:
		t.Fatalf("session helper cannot make state %s", want)
	}
	if err := e.st.FinishOp(ctx, op.ID, op.Epoch, result, "", e.clock()); err != nil {
		t.Fatal(err)
	}
	switch want {
	case domain.SessionSuspending:
		step(domain.SessionActive, domain.SessionSuspending, lifecycle.SuspendRequested, nil)
	case domain.SessionHostLost:
		step(domain.SessionActive, domain.SessionHostLost, lifecycle.HeartbeatLost, nil)
	}
	return s
}

// taskSpecFixture is the profile spec the test tasks run with: one
// repository, so the harness works in /work/app.
var taskSpecFixture = apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Model: "sonnet", Mode: "plan",
	Credentials: []string{"ant"}, Repos: []apiv1.ProfileRepo{{URL: "https://github.com/acme/app.git", Path: "app"}}}

// task writes a task of profile "rev" in state (with errMsg) working in
// sessionID ("" for none).
func (e *taskEnv) task(t *testing.T, id domain.TaskID, sessionID domain.SessionID, state domain.TaskState, errMsg string) domain.Task {
	t.Helper()
	ctx := context.Background()
	p, err := e.st.GetProfileByName(ctx, domain.FirstOrg, "rev")
	if errors.Is(err, store.ErrNotFound) {
		spec, _ := json.Marshal(taskSpecFixture)
		p, err = e.st.CreateProfile(ctx, domain.Profile{ID: "prof-rev", Org: domain.FirstOrg, Name: "rev", Spec: spec, CreatedAt: e.clock()})
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(taskRecord{Spec: taskSpecFixture, Receipt: apiv1.Receipt{Model: "sonnet"}})
	tk, err := e.st.CreateTask(ctx, domain.Task{ID: id, ProfileID: p.ID, ProfileVersion: p.Version, Receipt: rec, Title: "title of " + string(id),
		SessionID: sessionID, Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: "ada"}, CreatedAt: e.clock()})
	if err != nil {
		t.Fatal(err)
	}
	if state != "" && state != domain.TaskStarting {
		if err := e.st.SetTaskState(ctx, id, state, errMsg, e.clock()); err != nil {
			t.Fatal(err)
		}
		tk.State, tk.Error = state, errMsg
	}
	return tk
}

func (e *taskEnv) events(t *testing.T, taskID domain.TaskID) []domain.TaskEvent {
	t.Helper()
	evs, err := e.st.ListTaskEvents(context.Background(), taskID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (e *taskEnv) getTask(t *testing.T, id domain.TaskID) domain.Task {
	t.Helper()
	tk, err := e.st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// summary is "type:payload" of each event.
func summary(evs []domain.TaskEvent) []string {
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
			if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want domain.ErrInvalid saying %q", err, tt.wantErr)
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

func tev(typ, payload string) domain.TaskEvent {
	return domain.TaskEvent{Type: typ, Payload: json.RawMessage(payload)}
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
		state     domain.TaskState
		err       string
		evs       []domain.TaskEvent
		wantState domain.TaskState
		wantErr   string
		wantOK    bool
	}
	tests := []tc{
		// One event of each kind that moves the state, in every task state.
		{"starting, run_started", domain.TaskStarting, "", []domain.TaskEvent{run}, domain.TaskRunning, "", true},
		{"running, run_started", domain.TaskRunning, "", []domain.TaskEvent{run}, domain.TaskRunning, "", false},
		{"idle, run_started clears the error", domain.TaskIdle, "model: overloaded", []domain.TaskEvent{run}, domain.TaskRunning, "", true},
		{"stopped, run_started", domain.TaskStopped, "", []domain.TaskEvent{run}, domain.TaskStopped, "", false},
		{"failed, run_started", domain.TaskFailed, "clone failed", []domain.TaskEvent{run}, domain.TaskFailed, "clone failed", false},
		{"starting, idle", domain.TaskStarting, "", []domain.TaskEvent{idle}, domain.TaskIdle, "", true},
		{"running, idle", domain.TaskRunning, "", []domain.TaskEvent{idle}, domain.TaskIdle, "", true},
		{"idle, a lone idle keeps the last turn's error", domain.TaskIdle, authMsg, []domain.TaskEvent{idle}, domain.TaskIdle, authMsg, false},
		{"idle, a lone idle", domain.TaskIdle, "", []domain.TaskEvent{idle}, domain.TaskIdle, "", false},
		{"stopped, idle", domain.TaskStopped, "", []domain.TaskEvent{idle}, domain.TaskStopped, "", false},
		{"failed, idle", domain.TaskFailed, "clone failed", []domain.TaskEvent{idle}, domain.TaskFailed, "clone failed", false},
		{"starting, error", domain.TaskStarting, "", []domain.TaskEvent{authErr}, domain.TaskStarting, authMsg, true},
		{"running, error shows at once", domain.TaskRunning, "", []domain.TaskEvent{authErr}, domain.TaskRunning, authMsg, true},
		{"idle, error", domain.TaskIdle, "model: overloaded", []domain.TaskEvent{authErr}, domain.TaskIdle, authMsg, true},
		{"stopped, error", domain.TaskStopped, "", []domain.TaskEvent{authErr}, domain.TaskStopped, "", false},
		{"failed, error", domain.TaskFailed, "clone failed", []domain.TaskEvent{authErr}, domain.TaskFailed, "clone failed", false},

		// Batches.
		{"no events", domain.TaskRunning, "", nil, domain.TaskRunning, "", false},
		{"error then idle keeps kind: message", domain.TaskRunning, "", []domain.TaskEvent{authErr, idle}, domain.TaskIdle, authMsg, true},
		{"a whole failed turn", domain.TaskIdle, "", []domain.TaskEvent{run, text, authErr, idle}, domain.TaskIdle, authMsg, true},
		{"a whole successful turn clears the last error", domain.TaskIdle, authMsg, []domain.TaskEvent{run, text, idle}, domain.TaskIdle, "", true},
		{"the last error of a turn wins", domain.TaskRunning, "", []domain.TaskEvent{authErr, modelErr, idle}, domain.TaskIdle, "model: overloaded", true},
		{"a later turn's run_started drops an earlier turn's error", domain.TaskRunning, "", []domain.TaskEvent{authErr, idle, run, idle}, domain.TaskIdle, "", true},
		{"a turn's error from an earlier batch survives its idle", domain.TaskRunning, authMsg, []domain.TaskEvent{text, idle}, domain.TaskIdle, authMsg, true},
		{"a failed first turn without a run", domain.TaskStarting, "", []domain.TaskEvent{tev(guestapi.EventError, `{"kind":"bad_prompt","message":"empty"}`), idle},
			domain.TaskIdle, "bad_prompt: empty", true},
		{"stopped takes a whole turn unchanged", domain.TaskStopped, "", []domain.TaskEvent{run, authErr, idle}, domain.TaskStopped, "", false},
		{"failed takes a whole turn unchanged", domain.TaskFailed, "x", []domain.TaskEvent{run, idle}, domain.TaskFailed, "x", false},
	}
	// Every other event type changes nothing, in every state.
	for _, typ := range []string{guestapi.EventAssistantText, guestapi.EventToolCall, guestapi.EventToolResult, guestapi.EventFileChanged,
		guestapi.EventUsage, guestapi.EventQuestion, TaskEventPrompt, TaskEventSession, TaskEventRepoCloned, TaskEventStopped,
		TaskEventSetupFailed, "something_new"} {
		for _, st := range []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle, domain.TaskStopped, domain.TaskFailed} {
			msg := ""
			if st == domain.TaskIdle || st == domain.TaskFailed {
				msg = "model: overloaded"
			}
			tests = append(tests, tc{fmt.Sprintf("%s, %s", st, typ), st, msg, []domain.TaskEvent{tev(typ, `{"text":"x"}`)}, st, msg, false})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, msg, ok := taskStateAfter(domain.Task{ID: "t", State: tt.state, Error: tt.err}, tt.evs)
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
	const limit = defaultMaxEventBytes
	// data of n bytes: {"text":"xxx..."}
	data := func(n int) json.RawMessage {
		return json.RawMessage(`{"text":"` + strings.Repeat("x", n-len(`{"text":""}`)) + `"}`)
	}
	typ := guestapi.EventAssistantText
	fits := limit - len(typ) - len("u")             // the data that fills an event of turn "u" exactly, as sent
	stored := limit - len(typ) - len(`,"turn":"u"`) // the data that fills it exactly as stored (the turn merged in)
	longTurn := strings.Repeat("t", maxNoteTurn+1)
	tests := []struct {
		name      string
		e         guestapi.HarnessEvent
		max       int
		wantType  string
		wantData  string
		wantAt    time.Time
		wantGuest int64
		wantOver  bool
	}{
		{name: "a harness event", e: guestapi.HarnessEvent{Seq: 4, Type: guestapi.EventToolResult, Turn: "u", At: now.Add(-time.Hour), Data: json.RawMessage(`{"id":"c","output":"ok"}`)},
			wantType: guestapi.EventToolResult, wantData: `{"id":"c","output":"ok","turn":"u"}`, wantAt: now.Add(-time.Hour), wantGuest: 4},
		{name: "the coordinator's prompt", e: guestapi.HarnessEvent{Seq: 1, Type: TaskEventPrompt, Turn: "u", At: now, Data: json.RawMessage(`{"text":"rm -rf /"}`)},
			wantType: guestapi.EventError, wantData: `{"kind":"harness","message":"the session sent an event of unknown type \"prompt\"","turn":"u"}`, wantAt: now, wantGuest: 1},
		{name: "the coordinator's repo_cloned", e: guestapi.HarnessEvent{Seq: 2, Type: TaskEventRepoCloned, At: now},
			wantType: guestapi.EventError, wantData: `{"kind":"harness","message":"the session sent an event of unknown type \"repo_cloned\"","turn":""}`, wantAt: now, wantGuest: 2},
		{name: "a long unknown type is cut", e: guestapi.HarnessEvent{Seq: 3, Type: strings.Repeat("ü", 100), At: now},
			wantType: guestapi.EventError, wantData: `{"kind":"harness","message":"the session sent an event of unknown type \"` + strings.Repeat("ü", 64) + `\"","turn":""}`, wantAt: now, wantGuest: 3},
		{name: "an unknown type's note drops a long turn", e: guestapi.HarnessEvent{Seq: 3, Type: "x", Turn: longTurn, At: now},
			wantType: guestapi.EventError, wantData: `{"kind":"harness","message":"the session sent an event of unknown type \"x\"","turn":""}`, wantAt: now, wantGuest: 3},
		{name: "data over the limit as sent", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: "u", At: now, Data: data(fits + 1)},
			wantType: typ, wantData: fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":"u"}`, limit+1), wantAt: now, wantGuest: 5, wantOver: true},
		{name: "an event at the limit as stored", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: "u", At: now, Data: data(stored)},
			wantType: typ, wantData: string(data(stored)[:len(data(stored))-1]) + `,"turn":"u"}`, wantAt: now, wantGuest: 5},
		{name: "an event a byte over the limit as stored", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: "u", At: now, Data: data(stored + 1)},
			wantType: typ, wantData: fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":"u"}`, limit+1), wantAt: now, wantGuest: 5, wantOver: true},
		{name: "data that grows when stored", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: "u", At: now, Data: json.RawMessage(`{"t":"` + strings.Repeat("<", limit/4) + `"}`)},
			wantType: typ, wantData: fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":"u"}`, len(typ)+len(`{"t":"","turn":"u"}`)+6*(limit/4)), wantAt: now, wantGuest: 5, wantOver: true},
		{name: "a turn over the limit", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: strings.Repeat("t", limit), At: now, Data: data(20)},
			wantType: typ, wantData: fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":""}`, len(typ)+limit+20), wantAt: now, wantGuest: 5, wantOver: true},
		{name: "a type, turn and data over the limit together", e: guestapi.HarnessEvent{Seq: 5, Type: typ, Turn: strings.Repeat("t", limit/2), At: now, Data: data(limit / 2)},
			wantType: typ, wantData: fmt.Sprintf(`{"bytes":%d,"truncated":true,"turn":""}`, len(typ)+limit), wantAt: now, wantGuest: 5, wantOver: true},
		{name: "no bound", max: -1, e: guestapi.HarnessEvent{Seq: 5, Type: typ, At: now, Data: data(2 * limit)},
			wantType: typ, wantData: string(data(2 * limit)), wantAt: now, wantGuest: 5},
		{name: "a time in the future is now", e: guestapi.HarnessEvent{Seq: 6, Type: guestapi.EventIdle, At: now.Add(2 * time.Minute)},
			wantType: guestapi.EventIdle, wantAt: now, wantGuest: 6},
		{name: "a little clock skew is kept", e: guestapi.HarnessEvent{Seq: 7, Type: guestapi.EventIdle, At: now.Add(30 * time.Second)},
			wantType: guestapi.EventIdle, wantAt: now.Add(30 * time.Second), wantGuest: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			max := tt.max
			if max == 0 {
				max = limit
			}
			got, over := guestTaskEvent(tt.e, now, max)
			if got.Type != tt.wantType || string(got.Payload) != tt.wantData || !got.At.Equal(tt.wantAt) || got.GuestSeq != tt.wantGuest || over != tt.wantOver {
				data := string(got.Payload)
				if len(data) > 200 {
					data = data[:200] + "..."
				}
				t.Errorf("stored %s %s at %s guest seq %d over %v, want %s %.200s at %s %d %v", got.Type, data, got.At, got.GuestSeq, over,
					tt.wantType, tt.wantData, tt.wantAt, tt.wantGuest, tt.wantOver)
			}
		})
	}
}

// agentTaskEnv is a taskEnv with the images, harnesses and secrets of
// seedAgents, for StartTask.
func agentTaskEnv(t *testing.T) *taskEnv {
	t.Helper()
	e := newTaskEnv(t)
	coordinatortest.SeedAgents(t, e.st, func(name, kind string, meta apiv1.SecretMeta, value []byte) error {
		_, err := e.vault.Create(context.Background(), secrets.SecretRequest{Org: domain.FirstOrg, Name: name, Kind: kind, Meta: meta, Value: value})
		return err
	})
	return e
}

func TestStartTask(t *testing.T) {
	t.Parallel()
	e := agentTaskEnv(t)
	ctx := context.Background()
	spec := apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}, Env: map[string]string{"LOG_LEVEL": "debug"},
		Repos: []apiv1.ProfileRepo{{URL: "https://github.com/acme/app.git", Credential: "gh"}}, IdleTimeoutS: 900, Egress: []string{"pypi.org"}}
	p, err := e.profiles.CreateProfile(ctx, domain.FirstOrg, "rev", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := "  add a /healthz endpoint\nand a test for it"
	ada := domain.Owner{OrgID: domain.FirstOrg, UserID: "ada"}
	tk, err := e.co.StartTask(ctx, StartTaskRequest{Profile: "rev", Prompt: prompt, Owner: ada, Grantee: adminAda})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := e.st.GetSession(ctx, tk.SessionID); err != nil || s.Spec.Owner != ada || tk.Owner != ada {
		t.Errorf("the task's owner %+v, its session's %+v (%v): want ada's", tk.Owner, s.Spec.Owner, err)
	}
	if tk.Title != "add a /healthz endpoint" || tk.ProfileID != p.Profile.ID || tk.ProfileVersion != 1 || tk.State != domain.TaskStarting || tk.SessionID == "" {
		t.Errorf("task %+v", tk)
	}
	var rec taskRecord
	if err := json.Unmarshal(tk.Receipt, &rec); err != nil || rec.Spec.Repos[0].Path != "app" || rec.Receipt.Image.Name != "py" ||
		rec.Receipt.Harness.Name != "claude-code" || len(rec.Receipt.Credentials) != 2 {
		t.Errorf("receipt %s: %v", tk.Receipt, err)
	}
	// The session: the profile's image, harness, env, idle timeout, egress
	// and model credential; the git login stays with the coordinator.
	s, err := e.st.GetSession(ctx, tk.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ms := s.Spec
	ant, _ := e.st.GetSecretByName(ctx, domain.FirstOrg, "ant")
	if ms.Image != "py" || ms.Harness == "" || ms.Env["LOG_LEVEL"] != "debug" || ms.IdleTimeoutSec != 900 || !slices.Contains(ms.Egress, "pypi.org") ||
		!reflect.DeepEqual(ms.Credentials, []domain.CredentialGrant{{Kind: "anthropic_api_key", SecretID: ant.ID}}) {
		t.Errorf("session spec %+v", ms)
	}
	if s.IdempotencyKey != "task-"+string(tk.ID) {
		t.Errorf("session idempotency key %q", s.IdempotencyKey)
	}
	evs := e.events(t, tk.ID)
	if len(evs) != 2 || evs[0].Type != TaskEventSession || evs[1].Type != TaskEventPrompt {
		t.Fatalf("events %q", summary(evs))
	}
	var sess struct {
		SessionID domain.SessionID `json:"session_id"`
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

	// A title given is kept, and who started it.
	tk2, err := e.co.StartTask(ctx, StartTaskRequest{Profile: string(p.Profile.ID), Prompt: "x", Title: "my title", StartedBy: "alice-cli", RunID: "run-3", Owner: ada})
	if err != nil || tk2.Title != "my title" || tk2.StartedBy != "alice-cli" || tk2.RunID != "run-3" {
		t.Errorf("start with a title: %+v %v", tk2, err)
	}
}

// Who starts tasks in these tests: ada as an admin of the first
// organisation, and as a member there holding grants to group eng.
var (
	adminAda  = domain.Grantee{OrgID: domain.FirstOrg, UserID: "ada", Curator: true}
	memberAda = domain.Grantee{OrgID: domain.FirstOrg, UserID: "ada"}
)

// TestStartTaskByGrant: a member starts a task with a profile granted to
// a group they are in, or to them.
func TestStartTaskByGrant(t *testing.T) {
	t.Parallel()
	for _, g := range []domain.Grant{{Kind: domain.GrantGroup, Subject: "eng"}, {Kind: domain.GrantEveryone}} {
		e := agentTaskEnv(t)
		ctx := context.Background()
		if _, err := e.profiles.CreateProfile(ctx, domain.FirstOrg, "rev", apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}},
			[]domain.Grant{g}); err != nil {
			t.Fatal(err)
		}
		who := memberAda
		who.Groups = []string{"ops", "eng"}
		if _, err := e.co.StartTask(ctx, StartTaskRequest{Profile: "rev", Prompt: "go", Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: "ada"}, Grantee: who}); err != nil {
			t.Fatalf("granted %s: %v", g, err)
		}
	}
}

func TestStartTaskRefuses(t *testing.T) {
	t.Parallel()
	o1 := domain.Owner{OrgID: domain.FirstOrg, UserID: "ada"}
	tests := []struct {
		name    string
		req     StartTaskRequest
		setup   func(t *testing.T, e *taskEnv)
		wantIs  error
		wantMsg string
	}{
		{name: "empty prompt", req: StartTaskRequest{Profile: "rev", Prompt: " ", Owner: o1, Grantee: adminAda}, wantIs: domain.ErrInvalid, wantMsg: "the prompt is empty"},
		{name: "NUL in the prompt", req: StartTaskRequest{Profile: "rev", Prompt: "a\x00", Owner: o1, Grantee: adminAda}, wantIs: domain.ErrInvalid, wantMsg: "without NUL bytes"},
		{name: "no owner", req: StartTaskRequest{Profile: "rev", Prompt: "go"}, wantIs: domain.ErrInvalid, wantMsg: "a task needs an owner"},
		{name: "no profile", req: StartTaskRequest{Prompt: "go", Owner: o1, Grantee: adminAda}, wantIs: domain.ErrInvalid, wantMsg: "a task needs a profile"},
		{name: "unknown profile", req: StartTaskRequest{Profile: "nope", Prompt: "go", Owner: o1, Grantee: adminAda}, wantIs: store.ErrNotFound, wantMsg: `profile "nope"`},
		{name: "deleted profile", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: o1, Grantee: adminAda}, wantIs: store.ErrNotFound, wantMsg: `profile "rev"`,
			setup: func(t *testing.T, e *taskEnv) {
				if _, err := e.profiles.DeleteProfile(context.Background(), domain.FirstOrg, "rev"); err != nil {
					t.Fatal(err)
				}
			}},
		// rev is granted to the group "eng" only.
		{name: "a member without the grant", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: o1, Grantee: memberAda}, wantIs: store.ErrNotFound, wantMsg: `profile "rev"`},
		{name: "a member of another group", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: o1,
			Grantee: domain.Grantee{OrgID: domain.FirstOrg, UserID: "ada", Groups: []string{"ops"}}}, wantIs: store.ErrNotFound, wantMsg: `profile "rev"`},
		{name: "another organisation's admin", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: domain.Owner{OrgID: "o2", UserID: "cara"},
			Grantee: domain.Grantee{OrgID: "o2", UserID: "cara", Curator: true}}, wantIs: store.ErrNotFound, wantMsg: `profile "rev"`},
		{name: "a grantee of another organisation than the owner", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: o1,
			Grantee: domain.Grantee{OrgID: "o2", Curator: true}}, wantIs: domain.ErrInvalid, wantMsg: "of its owner's organisation"},
		{name: "profile with problems", req: StartTaskRequest{Profile: "rev", Prompt: "go", Owner: o1, Grantee: adminAda}, wantIs: domain.ErrInvalid, wantMsg: `no secret "ant"`,
			setup: func(t *testing.T, e *taskEnv) {
				if _, err := e.vault.Delete(context.Background(), domain.FirstOrg, "ant"); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := agentTaskEnv(t)
			ctx := context.Background()
			if _, err := e.profiles.CreateProfile(ctx, domain.FirstOrg, "rev", apiv1.ProfileSpec{Image: "py", Harness: "claude-code", Credentials: []string{"ant"}},
				[]domain.Grant{{Kind: domain.GrantGroup, Subject: "eng"}}); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, e)
			}
			_, err := e.co.StartTask(ctx, tt.req)
			if !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want %v saying %q", err, tt.wantIs, tt.wantMsg)
			}
			if ss, _ := e.st.ListSessions(ctx, domain.SessionFilter{}); len(ss) != 0 {
				t.Errorf("a refused start created %d sessions", len(ss))
			}
			if ts, _ := e.st.ListTasks(ctx, domain.TaskFilter{}); len(ts) != 0 {
				t.Errorf("a refused start recorded %d tasks", len(ts))
			}
		})
	}
}

func TestSendTask(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", domain.SessionActive,
		domain.SessionSpec{Credentials: []domain.CredentialGrant{{Kind: "anthropic_api_key", SecretID: "sec-1"}}})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventPrompt, map[string]any{"turn": "first", "text": "hi"})); err != nil {
		t.Fatal(err)
	}
	ops := e.st.Subscribe(ctx, coordinator.TopicOps)
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
	ph, _ := e.gw.Placeholder(ctx, "s1", "anthropic_api_key")
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
		task         domain.TaskState
		session      domain.SessionState
		id, text     string
		wantIs       error
		wantContains string
	}{
		{name: "stopped task", task: domain.TaskStopped, session: domain.SessionActive, wantIs: domain.ErrNotActive, wantContains: "task t1 is stopped"},
		{name: "failed task", task: domain.TaskFailed, session: domain.SessionActive, wantIs: domain.ErrNotActive, wantContains: "task t1 is failed"},
		{name: "starting task", task: domain.TaskStarting, session: domain.SessionActive, wantIs: domain.ErrBusy, wantContains: "task t1 is still starting"},
		{name: "unknown task", task: domain.TaskIdle, session: domain.SessionActive, id: "nope", wantIs: store.ErrNotFound, wantContains: "get task nope"},
		{name: "empty text", task: domain.TaskIdle, session: domain.SessionActive, text: "\n", wantIs: domain.ErrInvalid, wantContains: "the prompt is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			e.session(t, "s1", "host-a", tt.session, domain.SessionSpec{})
			e.task(t, "t1", "s1", tt.task, "")
			id, text := "t1", "more"
			if tt.id != "" {
				id = tt.id
			}
			if tt.text != "" {
				text = tt.text
			}
			_, err := e.co.SendTask(context.Background(), domain.TaskID(id), text)
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
		session   domain.SessionState
		task      domain.TaskState
		interrupt bool // an interrupt is queued for the harness
		suspend   bool // the session is asked to suspend
		events    int  // stopped events afterwards
	}{
		{name: "running in an active session", session: domain.SessionActive, task: domain.TaskRunning, interrupt: true, suspend: true, events: 1},
		{name: "idle in a dead session", session: domain.SessionDead, task: domain.TaskIdle, events: 1},
		{name: "failed", session: domain.SessionDead, task: domain.TaskFailed, events: 1},
		{name: "already stopped", session: domain.SessionActive, task: domain.TaskStopped, events: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			e.session(t, "s1", "host-a", tt.session, domain.SessionSpec{})
			e.task(t, "t1", "s1", tt.task, "")
			for range 2 { // a second stop changes nothing
				tk, err := e.co.StopTask(ctx, "t1")
				if err != nil || tk.State != domain.TaskStopped || tk.Error != "" {
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
				if _, err := e.sessions.WaitSession(wctx, "s1", func(s domain.Session) bool { return s.DesiredState == "idle" }); err != nil {
					t.Errorf("the session was not asked to suspend: %v", err)
				}
			}
			if _, err := e.co.StopTask(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("stop an unknown task: %v", err)
			}
		})
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ptr[T any](v T) *T { return &v }
