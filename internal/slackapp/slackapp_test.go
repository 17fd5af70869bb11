package slackapp

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/slacktest"
	"github.com/engrams/engrams/internal/store"
)

const signing = "8f742231b10e8888abcd99yyyzzz85a5"

// fakeRuns records the runs mentions start.
type fakeRuns struct {
	mu    sync.Mutex
	calls []autorun.RunRequest
	seen  map[string]bool
}

func (f *fakeRuns) StartTriggered(_ context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kind != automations.TriggerSlackMention || !match(automations.Trigger{Kind: kind, Channels: []string{"C1"}}) {
		return nil, nil
	}
	f.calls = append(f.calls, req)
	return []autorun.Started{{Run: domain.AutomationRun{ID: "run-1"}, Created: true}}, nil
}

// fakeTasks records thread replies.
type fakeTasks struct {
	mu   sync.Mutex
	sent []string
}

func (f *fakeTasks) SendTask(_ context.Context, id domain.TaskID, text string) (domain.TaskEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, string(id)+": "+text)
	return domain.TaskEvent{}, nil
}

type env struct {
	app   *App
	st    store.Store
	slack *slacktest.Server
	runs  *fakeRuns
	tasks *fakeTasks
	task  domain.TaskID
}

func newEnv(t *testing.T, config map[string]any) *env {
	t.Helper()
	st := coordinatortest.NewStore(t)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := integrations.New(integrations.Deps{Store: st, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	slack := slacktest.Start(t, "xoxb-bot", "xapp-app")
	config["api_url"] = slack.APIURL()
	raw, _ := json.Marshal(config)
	if _, err := ins.Add(t.Context(), domain.IntegrationSlack, raw, map[string]string{"bot_token": "xoxb-bot", "signing_secret": signing,
		"app_token": "xapp-app"}); err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, slack: slack, runs: &fakeRuns{}, tasks: &fakeTasks{}}
	e.app, err = New(Config{Owner: "r1", RelayEvery: 20 * time.Millisecond}, Deps{Store: st, Integrations: ins, Runs: e.runs, Tasks: e.tasks})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	p, err := st.CreateProfile(ctx, domain.Profile{ID: "p1", Name: "agent", Spec: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.CreateTask(ctx, domain.Task{ID: "task-1", ProfileID: p.ID, ProfileVersion: p.Version, Receipt: []byte(`{}`), Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	e.task = task.ID
	return e
}

func (e *env) deliver(t *testing.T, body []byte, ts time.Time, secret string) (int, string) {
	t.Helper()
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, ts.Unix(), body))
	status, out := e.app.HandleEvents(t.Context(), h, body)
	b, _ := json.Marshal(out)
	return status, string(b)
}

func (e *env) events(t *testing.T, evs ...domain.TaskEvent) {
	t.Helper()
	if _, err := e.st.AppendTaskEvents(t.Context(), e.task, evs); err != nil {
		t.Fatal(err)
	}
}

func ev(typ string, data any) domain.TaskEvent {
	b, _ := json.Marshal(data)
	return domain.TaskEvent{Type: typ, Payload: b}
}

// TestMentionThreadAndRelay: a signed mention starts a run (once, however
// often Slack retries it); forged and stale deliveries start nothing; the
// task's thread gets each turn as one message edited as it grows, a
// reaction and a recap at its end; a reply in the thread goes to the task.
func TestMentionThreadAndRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]string{"C1": "agent"}, "dashboard_url": "https://engrams.example"})
	now := time.Now()
	if st, out := e.deliver(t, []byte(`{"type":"url_verification","challenge":"abc123"}`), now, signing); st != 200 || !strings.Contains(out, "abc123") {
		t.Fatalf("url_verification: %d %s", st, out)
	}
	root := e.slack.Post("C1", "", "<@UBOT> [profile=reviewer] look at the flaky test")
	mention := slacktest.Event("Ev1", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> [profile=reviewer] look at the flaky test",
		"ts": root, "channel": "C1"})
	for name, d := range map[string]struct {
		ts     time.Time
		secret string
	}{"forged": {now, "another-secret"}, "stale": {now.Add(-6 * time.Minute), signing}} {
		if st, _ := e.deliver(t, mention, d.ts, d.secret); st != http.StatusUnauthorized {
			t.Errorf("%s mention: %d, want 401", name, st)
		}
	}
	for range 2 { // Slack retries: the same event_id
		if st, out := e.deliver(t, mention, now, signing); st != 200 {
			t.Fatalf("mention: %d %s", st, out)
		}
	}
	if len(e.runs.calls) != 1 {
		t.Fatalf("%d runs started for one mention", len(e.runs.calls))
	}
	var p map[string]string
	_ = json.Unmarshal(e.runs.calls[0].Trigger, &p)
	if p["text"] != "look at the flaky test" || p["profile"] != "reviewer" || p["thread_ts"] != root || e.runs.calls[0].DedupKey != "slack:Ev1" {
		t.Fatalf("trigger payload %v", p)
	}
	payload, _ := json.Marshal(p)
	if err := e.app.TaskStarted(t.Context(), domain.AutomationRun{ID: "run-1", TriggerKind: "slack_mention", Trigger: payload}, e.task); err != nil {
		t.Fatal(err)
	}
	e.events(t, ev("prompt", map[string]string{"text": "look"}), ev("assistant_text", map[string]string{"text": "Looking at it"}))
	relay(t, e)
	e.events(t, ev("assistant_text", map[string]string{"text": "Found it: a race."}), ev("idle", map[string]string{"result": "Found it: a race."}))
	relay(t, e)
	msgs := e.slack.Thread("C1", root)
	if len(msgs) != 2 || !strings.Contains(msgs[0].Text, "Looking at it\nFound it: a race.") || len(msgs[0].Edits) != 1 ||
		!strings.Contains(msgs[1].Text, "https://engrams.example/tasks/task-1") {
		t.Fatalf("thread: %+v", msgs)
	}
	reacts := e.slack.Reactions()
	if len(reacts) != 2 || reacts[0].Name != "eyes" || reacts[1].Name != "white_check_mark" {
		t.Fatalf("reactions: %+v", reacts)
	}
	// Nothing new: no more posts.
	relay(t, e)
	if n := len(e.slack.Thread("C1", root)); n != 2 || e.slack.Calls("chat.postMessage") != 2 {
		t.Fatalf("%d messages, %d posts after a pass with nothing new", n, e.slack.Calls("chat.postMessage"))
	}
	reply := e.slack.Post("C1", root, "now fix it")
	e.deliver(t, slacktest.Event("Ev2", map[string]string{"type": "message", "user": "U1", "text": "now fix it", "ts": reply, "thread_ts": root,
		"channel": "C1"}), now, signing)
	e.deliver(t, slacktest.Event("Ev3", map[string]string{"type": "message", "user": "U1", "text": "in another thread", "ts": "1.2", "thread_ts": "1.1",
		"channel": "C1"}), now, signing)
	e.deliver(t, slacktest.Event("Ev4", map[string]string{"type": "message", "bot_id": "BBOT", "text": "bot echo", "ts": "1.3", "thread_ts": root,
		"channel": "C1"}), now, signing)
	if len(e.tasks.sent) != 1 || e.tasks.sent[0] != "task-1: now fix it" {
		t.Fatalf("replies sent to tasks: %v", e.tasks.sent)
	}
	// The next turn is a new message.
	e.events(t, ev("prompt", map[string]string{"text": "now fix it"}), ev("assistant_text", map[string]string{"text": "Fixed."}),
		ev("idle", map[string]string{"result": "Fixed."}))
	relay(t, e)
	if msgs := e.slack.Thread("C1", root); len(msgs) != 5 || msgs[3].Text != "Fixed." {
		t.Fatalf("thread after the second turn: %+v", msgs)
	}
}

func relay(t *testing.T, e *env) {
	t.Helper()
	if err := e.app.RelayOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestSocketMode: with socket_mode on, events come over the WebSocket,
// each acknowledged, and a mention starts a run as over HTTP.
func TestSocketMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"socket_mode": true, "default_profile": "agent"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.app.Run(ctx) }()
	defer func() { cancel(); <-done }()
	root := e.slack.Post("C1", "", "<@UBOT> hello")
	id := e.slack.PushEvent(slacktest.Event("EvS", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> hello", "ts": root,
		"channel": "C1"}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.runs.mu.Lock()
		n := len(e.runs.calls)
		e.runs.mu.Unlock()
		if n == 1 && e.slack.Acked(id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket mode: %d runs, acked %v", n, e.slack.Acked(id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var p map[string]string
	_ = json.Unmarshal(e.runs.calls[0].Trigger, &p)
	if p["text"] != "hello" || p["profile"] != "agent" {
		t.Fatalf("payload %v", p)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"event_callback"}`)
	good := Sign(signing, now.Unix(), body)
	for _, c := range []struct {
		name, secret, ts, sig string
		body                  []byte
		ok                    bool
	}{
		{"good", signing, "1700000000", good, body, true},
		{"other body", signing, "1700000000", good, []byte(`{}`), false},
		{"other secret", "x", "1700000000", good, body, false},
		{"old", signing, "1699999000", Sign(signing, 1699999000, body), body, false},
		{"future", signing, "1700000400", Sign(signing, 1700000400, body), body, false},
		{"no secret", "", "1700000000", good, body, false},
		{"bad timestamp", signing, "soon", good, body, false},
		{"empty signature", signing, "1700000000", "", body, false},
	} {
		if err := Verify(c.secret, c.ts, c.sig, c.body, now); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestOverrides(t *testing.T) {
	t.Parallel()
	text, over := overrides(stripMentions("<@UBOT>   [profile=reviewer] [model=opus] check <@U2>'s PR"))
	if text != "check 's PR" || over["profile"] != "reviewer" || over["model"] != "opus" {
		t.Fatalf("%q %v", text, over)
	}
}
