package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

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
func postEvents(t *testing.T, h http.Handler, hostID domain.HostID, sid domain.SessionID, body any) *httptest.ResponseRecorder {
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
	req := httptest.NewRequest(http.MethodPost, strings.Replace(hostlink.PathHarnessEvents, "{id}", string(sid), 1), strings.NewReader(string(raw)))
	req = req.WithContext(hostlink.WithHostID(req.Context(), hostID))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// ingestPost is one post of harness events in an ingest case.
type ingestPost struct {
	host    string // default host-a
	sid     string // default s1
	epoch   *int64 // default the session's
	rewound *int64
	events  []guestapi.HarnessEvent
	status  int   // default 200
	cursor  int64 // when 200
	code    string
}

// ingestCase posts batches for session s1 (on host-a) and checks the task.
type ingestCase struct {
	name      string
	state     domain.SessionState // of session s1 (on host-a); default Active
	noTask    bool                // s1 belongs to no task
	posts     []ingestPost
	wantTexts []string // the text of each task event, in order
	wantState domain.TaskState
	wantErr   string
}

// ingestAcceptCases are batches that are taken, in part or whole.
func ingestAcceptCases() []ingestCase {
	return []ingestCase{
		{name: "cursor of a fresh task", posts: []ingestPost{{cursor: 0}}, wantState: domain.TaskStarting},
		{name: "appended in order, with their turn",
			posts:     []ingestPost{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {cursor: 3}},
			wantTexts: []string{"a1", "a2", "a3"}, wantState: domain.TaskStarting},
		{name: "re-sent events are appended once",
			posts: []ingestPost{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {events: hevs(guestapi.EventAssistantText, "b", 1, 3), cursor: 3},
				{events: hevs(guestapi.EventAssistantText, "c", 2, 5), cursor: 5}},
			wantTexts: []string{"a1", "a2", "a3", "c4", "c5"}, wantState: domain.TaskStarting},
		{name: "rewound_to lowers the cursor; the lost state's events stay",
			posts: []ingestPost{{events: hevs(guestapi.EventAssistantText, "a", 1, 4), cursor: 4}, {rewound: ptr[int64](2), cursor: 2},
				{events: hevs(guestapi.EventAssistantText, "b", 1, 4), cursor: 4}},
			wantTexts: []string{"a1", "a2", "a3", "a4", "b3", "b4"}, wantState: domain.TaskStarting},
		{name: "rewound_to with the batch that follows it",
			posts: []ingestPost{{events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3},
				{rewound: ptr[int64](1), events: hevs(guestapi.EventAssistantText, "b", 2, 2), cursor: 2}},
			wantTexts: []string{"a1", "a2", "a3", "b2"}, wantState: domain.TaskStarting},
		{name: "rewound_to above the cursor is ignored",
			posts:     []ingestPost{{events: hevs(guestapi.EventAssistantText, "a", 1, 2), cursor: 2}, {rewound: ptr[int64](9), cursor: 2}},
			wantTexts: []string{"a1", "a2"}, wantState: domain.TaskStarting},
		{name: "run_started makes the task running",
			posts:     []ingestPost{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`)}, cursor: 1}},
			wantTexts: []string{"r"}, wantState: domain.TaskRunning},
		{name: "idle makes it idle",
			posts: []ingestPost{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`)}, cursor: 1},
				{events: []guestapi.HarnessEvent{hev(2, guestapi.EventAssistantText, `{"text":"t"}`), hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "t", "i"}, wantState: domain.TaskIdle},
		{name: "an error and its idle in one batch",
			posts: []ingestPost{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`),
				hev(2, guestapi.EventError, `{"kind":"auth","message":"key refused","text":"e"}`), hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "e", "i"}, wantState: domain.TaskIdle, wantErr: "auth: key refused"},
		{name: "an error and its idle in two batches",
			posts: []ingestPost{{events: []guestapi.HarnessEvent{hev(1, guestapi.EventRunStarted, `{"text":"r"}`),
				hev(2, guestapi.EventError, `{"kind":"auth","message":"key refused","text":"e"}`)}, cursor: 2},
				{events: []guestapi.HarnessEvent{hev(3, guestapi.EventIdle, `{"text":"i"}`)}, cursor: 3}},
			wantTexts: []string{"r", "e", "i"}, wantState: domain.TaskIdle, wantErr: "auth: key refused"},
		{name: "refused for an older epoch", posts: []ingestPost{{epoch: ptr[int64](0), events: hevs(guestapi.EventUsage, "u", 1, 1), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: domain.TaskStarting},
		{name: "a suspending session's events are taken", state: domain.SessionSuspending,
			posts: []ingestPost{{events: hevs(guestapi.EventAssistantText, "u", 1, 1), cursor: 1}}, wantTexts: []string{"u1"}, wantState: domain.TaskStarting},
	}
}

// ingestRefuseCases are batches that are refused or kept out of the task.
func ingestRefuseCases() []ingestCase {
	return []ingestCase{
		{name: "a guest cannot write the coordinator's events",
			posts:     []ingestPost{{events: []guestapi.HarnessEvent{hev(1, TaskEventStopped, `{"text":"s"}`), hev(2, guestapi.EventAssistantText, `{"text":"t"}`)}, cursor: 2}},
			wantTexts: []string{"", "t"}, wantState: domain.TaskStarting, wantErr: `harness: the session sent an event of unknown type "stopped"`},
		{name: "refused from another host", posts: []ingestPost{{host: "host-b", events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: domain.TaskStarting},
		{name: "refused for a newer epoch", posts: []ingestPost{{epoch: ptr[int64](2), events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: domain.TaskStarting},
		{name: "refused when the session has no VM", state: domain.SessionHostLost,
			posts:     []ingestPost{{events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: domain.TaskStarting},
		{name: "refused for a session not yet placed", state: domain.SessionCreated,
			posts:     []ingestPost{{events: hevs(guestapi.EventIdle, "x", 1, 2), status: 409, code: hostlink.CodeStaleEpoch}},
			wantState: domain.TaskStarting},
		{name: "unknown session", posts: []ingestPost{{sid: "nope", events: hevs(guestapi.EventIdle, "x", 1, 1), status: 404, code: "not_found"}},
			wantState: domain.TaskStarting},
		{name: "a session without a task: acknowledged with the last seq", noTask: true,
			posts: []ingestPost{{cursor: 0}, {events: hevs(guestapi.EventAssistantText, "a", 1, 3), cursor: 3}, {events: hevs(guestapi.EventAssistantText, "a", 7, 9), cursor: 9}}},
		{name: "a session without a task still checks the host", noTask: true,
			posts: []ingestPost{{host: "host-b", events: hevs(guestapi.EventAssistantText, "a", 1, 3), status: 409, code: hostlink.CodeStaleEpoch}}},
	}
}

func TestIngestHarnessEvents(t *testing.T) {
	t.Parallel()
	for _, tt := range append(ingestAcceptCases(), ingestRefuseCases()...) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runIngestCase(t, tt)
		})
	}
}

func runIngestCase(t *testing.T, tt ingestCase) {
	t.Helper()
	e := newTaskEnv(t)
	state := tt.state
	if state == "" {
		state = domain.SessionActive
	}
	s := e.session(t, "s1", "host-a", state, domain.SessionSpec{})
	if !tt.noTask {
		e.task(t, "t1", "s1", "", "")
	}
	h := e.hostLink()
	for i, p := range tt.posts {
		postIngest(t, h, s, i, p)
	}
	if tt.noTask {
		if ts, err := e.st.ListTasks(context.Background(), domain.TaskFilter{}); err != nil || len(ts) != 0 {
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
}

// postIngest sends post i of a case for session s and checks the answer.
func postIngest(t *testing.T, h http.Handler, s domain.Session, i int, p ingestPost) {
	t.Helper()
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
	rec := postEvents(t, h, domain.HostID(host), domain.SessionID(sid), hostlink.HarnessEventsRequest{Epoch: epoch, RewoundTo: p.rewound, Events: p.events})
	if rec.Code != status {
		t.Fatalf("post %d: status %d, want %d: %s", i, rec.Code, status, rec.Body)
	}
	if status == http.StatusOK {
		var resp hostlink.HarnessEventsResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Cursor != p.cursor {
			t.Fatalf("post %d: answer %s (%v), want cursor %d", i, rec.Body, err, p.cursor)
		}
		return
	}
	var eb hostlink.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Code != p.code || eb.Error == "" {
		t.Fatalf("post %d: error body %s (%v), want code %s", i, rec.Body, err, p.code)
	}
}

// TestIngestSideEffects: appended events record session activity, stamp
// the turn into their payload and wake the task's followers; a re-sent
// batch does neither.
func TestIngestSideEffects(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", "", "")
	h := e.hostLink()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := e.st.Subscribe(ctx, Topic("t1"))
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
			s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
			e.task(t, "t1", "s1", "", "")
			rec := postEvents(t, e.hostLink(), "host-a", "s1", tt.body(s.Epoch))
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
				rec := postEvents(t, e.hostLink(), "host-a", "s1", hostlink.HarnessEventsRequest{Epoch: s.Epoch, Events: tooMany[:maxHarnessEventBatch]})
				if rec.Code != http.StatusOK || len(e.events(t, "t1")) != maxHarnessEventBatch {
					t.Errorf("a batch of %d: %d %s", maxHarnessEventBatch, rec.Code, rec.Body)
				}
			}
		})
	}
}
