package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/intake"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/slacktest"
	"github.com/engrams/engrams/internal/store"
)

const signing = "8f742231b10e8888abcd99yyyzzz85a5"

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
	runs  *connectortest.Runs
	in    *intake.Pipeline
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
	if _, err := ins.Add(t.Context(), domain.FirstOrg, domain.IntegrationSlack, raw, map[string]string{"bot_token": "xoxb-bot", "signing_secret": signing,
		"app_token": "xapp-app"}); err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, slack: slack, tasks: &fakeTasks{}}
	e.runs = &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerMention: {Channels: []string{"C1"}}}}
	e.app, err = New(Config{Owner: "r1", RelayEvery: 20 * time.Millisecond}, Deps{Store: st, People: st, Settings: ins, Tasks: e.tasks, HTTP: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	// U1 is ada, an engrams member, by the email Slack confirmed for her.
	if err := st.CreateUser(t.Context(), domain.User{ID: "u-ada", Email: "ada@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutMember(t.Context(), domain.FirstOrg, "u-ada", domain.RoleMember, time.Now()); err != nil {
		t.Fatal(err)
	}
	slack.AddUser(slacktest.User{ID: "U1", Email: "Ada@Example.com", EmailConfirmed: true})
	e.in = connectortest.Pipeline(t, e.runs, time.Now, e.app)
	ctx := t.Context()
	p, err := st.CreateProfile(ctx, domain.Profile{ID: "p1", Org: domain.FirstOrg, Name: "agent", Spec: []byte(`{}`)})
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

func (e *env) deliver(t *testing.T, body []byte, ts time.Time, secret string) (intake.Outcome, error) {
	t.Helper()
	return connectortest.Deliver(t, e.in, connector.SourceSlack, signed(secret)(body, ts, false), body)
}

func signed(secret string) func([]byte, time.Time, bool) http.Header {
	return func(body []byte, ts time.Time, forged bool) http.Header {
		key := secret
		if forged {
			key = "another-secret"
		}
		h := http.Header{}
		h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(HeaderSignature, Sign(key, ts.Unix(), body))
		return h
	}
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
// reaction and a recap at its end; a reply in the thread from its starter
// goes to the task.
func TestMentionThreadAndRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": []string{"agent", "reviewer"}}, "dashboard_url": "https://engrams.example"})
	now := time.Now()
	if out, err := e.deliver(t, []byte(`{"type":"url_verification","challenge":"abc123"}`), now, signing); err != nil ||
		!strings.Contains(fmt.Sprint(out.Answer), "abc123") {
		t.Fatalf("url_verification: %+v %v", out, err)
	}
	root := e.slack.Post("C1", "", "<@UBOT> [profile=reviewer] look at the flaky test")
	mention := slacktest.Event("Ev1", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> [profile=reviewer] look at the flaky test",
		"ts": root, "channel": "C1"})
	for name, d := range map[string]struct {
		ts     time.Time
		secret string
	}{"forged": {now, "another-secret"}, "stale": {now.Add(-6 * time.Minute), signing}} {
		if _, err := e.deliver(t, mention, d.ts, d.secret); !errors.Is(err, connector.ErrBadSignature) {
			t.Errorf("%s mention: %v, want a bad signature", name, err)
		}
	}
	for i := range 2 { // Slack retries: the same body, signed anew a second later
		if _, err := e.deliver(t, mention, now.Add(time.Duration(i)*time.Second), signing); err != nil {
			t.Fatalf("mention: %v", err)
		}
	}
	runs := e.runs.Runs()
	if len(runs) != 1 {
		t.Fatalf("%d runs started for one mention", len(runs))
	}
	p := runs[0].Payload
	if p["text"] != "look at the flaky test" || p["profile"] != "reviewer" || p["thread_ts"] != root || p["user"] != "U1" ||
		!strings.HasPrefix(runs[0].Key, "slack:") {
		t.Fatalf("trigger payload %v", p)
	}
	payload, _ := json.Marshal(p)
	if err := e.app.TaskStarted(t.Context(), connector.Run{ID: "run-1", Trigger: TriggerMention, Payload: payload}, e.task); err != nil {
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
	for id, inner := range map[string]map[string]string{
		"Ev2": {"type": "message", "user": "U1", "text": "now fix it", "ts": reply, "thread_ts": root, "channel": "C1"},
		"Ev3": {"type": "message", "user": "U1", "text": "in another thread", "ts": "1.2", "thread_ts": "1.1", "channel": "C1"},
		"Ev4": {"type": "message", "bot_id": "BBOT", "text": "bot echo", "ts": "1.3", "thread_ts": root, "channel": "C1"},
	} {
		if _, err := e.deliver(t, slacktest.Event(id, inner), now, signing); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
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

// TestWhoMaySteer: a mention may use only the profiles its channel
// names; a thread's task is steered by whoever started it (and the users
// the integration names), never by someone else in the channel, nor by a
// user of another workspace. Each refusal is a recorded refused run and a
// reply in the thread saying why; nothing reaches the task.
func TestWhoMaySteer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": "readonly"}, "thread_users": []string{"ULEAD"}})
	now := time.Now()
	root := e.slack.Post("C1", "", "<@UBOT> [profile=prod-deploy] ship it")
	if _, err := e.deliver(t, slacktest.Event("Ev1", map[string]string{"type": "app_mention", "user": "U1",
		"text": "<@UBOT> [profile=prod-deploy] ship it", "ts": root, "channel": "C1"}), now, signing); err != nil {
		t.Fatal(err)
	}
	runs := e.runs.Runs()
	if len(runs) != 1 || runs[0].Refused != "this channel may not use profile prod-deploy (it may use: readonly)" || runs[0].Payload["profile"] != "" {
		t.Fatalf("an override outside the channel's list: %+v", runs)
	}
	if th := e.slack.Thread("C1", root); len(th) != 1 || !strings.Contains(th[0].Text, "may not use profile prod-deploy") {
		t.Fatalf("the thread after a refused override: %+v", th)
	}
	// A plain mention runs on the channel's profile; its thread is U1's.
	root2 := e.slack.Post("C1", "", "<@UBOT> look")
	if _, err := e.deliver(t, slacktest.Event("Ev2", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> look", "ts": root2,
		"channel": "C1"}), now, signing); err != nil {
		t.Fatal(err)
	}
	runs = e.runs.Runs()
	if len(runs) != 2 || runs[1].Refused != "" || runs[1].Payload["profile"] != "readonly" {
		t.Fatalf("a plain mention: %+v", runs)
	}
	payload, _ := json.Marshal(runs[1].Payload)
	if err := e.app.TaskStarted(t.Context(), connector.Run{ID: "run-2", Trigger: TriggerMention, Payload: payload}, e.task); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		user, team string
		sent       bool
		why        string
	}{
		{"U2", "", false, "only the person who started this thread can steer its task"},
		{"U1", "T2", false, "users of other workspaces may not start or steer tasks here"},
		{"ULEAD", "", true, ""},
		{"U1", "T1", true, ""},
	} {
		ts := e.slack.Post("C1", root2, "do something else")
		inner := map[string]string{"type": "message", "user": c.user, "text": "do something else", "ts": ts, "thread_ts": root2, "channel": "C1"}
		if c.team != "" {
			inner["user_team"] = c.team
		}
		if _, err := e.deliver(t, slacktest.Event(fmt.Sprint("Evr", i), inner), now, signing); err != nil {
			t.Fatal(err)
		}
		last := e.slack.Thread("C1", root2)
		got := last[len(last)-1].Text
		if c.why != "" && !strings.Contains(got, c.why) {
			t.Errorf("reply from %s: the thread says %q, want why", c.user, got)
		}
	}
	if want := []string{"task-1: do something else", "task-1: do something else"}; !slices.Equal(e.tasks.sent, want) {
		t.Fatalf("sent to the task: %v, want only the lead's and the starter's", e.tasks.sent)
	}
	var refused []string
	for _, r := range e.runs.Runs()[2:] {
		refused = append(refused, r.Refused)
	}
	if len(refused) != 2 || !strings.HasPrefix(refused[0], "only the person") || !strings.HasPrefix(refused[1], "users of other workspaces") {
		t.Fatalf("refusals recorded: %q", refused)
	}
}

// TestChannelGrantHolds: an automation naming its own profile is held to
// the channel's grant too; in a channel shared with other workspaces, a
// sender whose workspace the event does not say is refused.
func TestChannelGrantHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": "readonly"}})
	now := time.Now()
	payload, _ := json.Marshal(Mention{Channel: "C1", User: "U1", TS: "1.1", ThreadTS: "1.1"})
	run := connector.Run{ID: "run-2", Trigger: TriggerMention, Payload: payload}
	if err := e.app.AllowProfile(t.Context(), run, "prod-deploy"); err == nil || !strings.Contains(err.Error(), "may not use profile prod-deploy") {
		t.Fatalf("a start_task on a profile the channel may not use: %v", err)
	}
	if err := e.app.AllowProfile(t.Context(), run, "readonly"); err != nil {
		t.Fatalf("the channel's profile: %v", err)
	}
	shared := slacktest.Event("Evx", map[string]string{"type": "app_mention", "user": "U9", "text": "<@UBOT> hi", "ts": "9.1", "channel": "C1"})
	shared = bytes.Replace(shared, []byte(`"team_id":"T1"`), []byte(`"team_id":"T1","is_ext_shared_channel":true`), 1)
	if _, err := e.deliver(t, shared, now, signing); err != nil {
		t.Fatal(err)
	}
	if last := e.runs.Runs(); !strings.HasPrefix(last[len(last)-1].Refused, "users of other workspaces") {
		t.Fatalf("a sender of no known workspace in a shared channel: %+v", last[len(last)-1])
	}
}

// TestConformance: Slack's Events API deliveries pass the integration
// seam's suite: a retry (the same body, signed anew) starts nothing.
func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"default_profile": "agent"})
	now := time.Now()
	body := slacktest.Event("EvC", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1.1", "channel": "C1"})
	connectortest.Run(t, connectortest.Case{Receiver: e.app, TriggerKind: TriggerMention, Trigger: connector.Trigger{}, Body: body, Now: now,
		Sign: signed(signing), Variants: []func(http.Header){
			func(h http.Header) { h.Set("X-Slack-Retry-Num", "1") },
			func(h http.Header) {
				ts := now.Add(2 * time.Second).Unix()
				h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
				h.Set(HeaderSignature, Sign(signing, ts, body))
			},
			func(h http.Header) { h.Set("X-Slack-Retry-Num", "2"); h.Set("X-Slack-Retry-Reason", "http_timeout") },
			func(h http.Header) { h.Set(HeaderTimestamp, " "+h.Get(HeaderTimestamp)) },
		}})
}

// TestAgentTextEscaped: what an agent writes reaches Slack as plain text:
// no broadcast, no mention, no disguised link.
func TestAgentTextEscaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"default_profile": "agent"})
	root := e.slack.Post("C1", "", "<@UBOT> go")
	payload, _ := json.Marshal(Mention{Channel: "C1", User: "U1", TS: root, ThreadTS: root})
	if err := e.app.TaskStarted(t.Context(), connector.Run{ID: "run-1", Trigger: TriggerMention, Payload: payload}, e.task); err != nil {
		t.Fatal(err)
	}
	e.events(t, ev("prompt", map[string]string{"text": "go"}),
		ev("assistant_text", map[string]string{"text": "<!channel> see <https://evil.example|docs.example.com> & <@U999>"}))
	relay(t, e)
	got := e.slack.Thread("C1", root)[0].Text
	if want := "&lt;!channel&gt; see &lt;https://evil.example|docs.example.com&gt; &amp; &lt;@U999&gt;"; got != want {
		t.Fatalf("relayed %q, want %q", got, want)
	}
	if got := e.app.Escape("text", "<!here>"); got != "&lt;!here&gt;" {
		t.Fatalf("a post_slack value: %q", got)
	}
}

func relay(t *testing.T, e *env) {
	t.Helper()
	if err := e.app.RelayOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestSocketMode: with socket_mode on, events come over the WebSocket,
// each acknowledged, and a mention goes through the same pipeline.
func TestSocketMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"socket_mode": true, "default_profile": "agent"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- NewSocket(e.app, e.in).Run(ctx) }()
	defer func() { cancel(); <-done }()
	root := e.slack.Post("C1", "", "<@UBOT> hello")
	id := e.slack.PushEvent(slacktest.Event("EvS", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> hello", "ts": root,
		"channel": "C1"}))
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := len(e.runs.Runs())
		if n == 1 && e.slack.Acked(id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket mode: %d runs, acked %v", n, e.slack.Acked(id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p := e.runs.Runs()[0].Payload
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
		if err := verify(c.secret, c.ts, c.sig, c.body, now); (err == nil) != c.ok {
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

// TestMentionsOnlyByMembers: a mention starts a run as the engrams member
// its sender is, found by the email Slack has confirmed for them and
// remembered; a sender who is no member (no such email, an email Slack
// has not confirmed, a member removed since) starts nothing and is told
// how to get access, in the thread.
func TestMentionsOnlyByMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": "agent"}})
	e.slack.AddUser(slacktest.User{ID: "U7", Email: "nobody@example.com", EmailConfirmed: true})
	e.slack.AddUser(slacktest.User{ID: "U8", Email: "ada@example.com"}) // set, not confirmed: anyone may type it
	now := time.Now()
	mention := func(id, user string) string {
		t.Helper()
		ts := e.slack.Post("C1", "", "<@UBOT> fix it")
		if _, err := e.deliver(t, slacktest.Event(id, map[string]string{"type": "app_mention", "user": user, "text": "<@UBOT> fix it",
			"ts": ts, "channel": "C1"}), now, signing); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return ts
	}
	mention("Ev1", "U1")
	mention("Ev2", "U1")
	for i, user := range []string{"U7", "U8", "U404"} {
		ts := mention(fmt.Sprintf("Ev%d", i+3), user)
		if msgs := e.slack.Thread("C1", ts); len(msgs) != 1 || !strings.Contains(msgs[0].Text, "not an engrams member") {
			t.Errorf("%s's mention: thread %+v, want a reply saying how to get access", user, msgs)
		}
	}
	runs := e.runs.Runs()
	if len(runs) != 5 {
		t.Fatalf("%d runs, want 5: %+v", len(runs), runs)
	}
	for i, r := range runs {
		member := i < 2
		if (r.Actor == "u-ada") != member || (r.Refused == "") != member {
			t.Errorf("run %d (%v): actor %q, refused %q", i, r.Payload["user"], r.Actor, r.Refused)
		}
	}
	if n := e.slack.Calls("users.info"); n != 4 {
		t.Errorf("users.info called %d times, want 4 (ada's account is remembered after the first)", n)
	}
	if id, err := e.st.GetIdentity(t.Context(), domain.FirstOrg, domain.IntegrationSlack, "T1:U1"); err != nil || id.UserID != "u-ada" || id.How != domain.IdentityByEmail {
		t.Errorf("ada's Slack account: %+v, %v", id, err)
	}
	// Removed from the organisation: the mapping no longer lets her in.
	if err := e.st.RemoveMember(t.Context(), domain.FirstOrg, "u-ada", now); err != nil {
		t.Fatal(err)
	}
	mention("Ev9", "U1")
	if runs := e.runs.Runs(); runs[len(runs)-1].Refused == "" || runs[len(runs)-1].Actor != "" {
		t.Errorf("a removed member's mention: %+v", runs[len(runs)-1])
	}
}

// TestLinkByCode: a person who is a member but whose Slack email does
// not match links their account with a code they got from engrams: said
// once in a mention, it maps the sender's account to them (their next
// mention starts a run as them); a code said again, another's guess, or
// an expired one links nothing, and each is answered.
func TestLinkByCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": "agent"}})
	ctx := t.Context()
	if err := e.st.CreateUser(ctx, domain.User{ID: "u-bob", Email: "bob@corp.example"}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.PutMember(ctx, domain.FirstOrg, "u-bob", domain.RoleMember, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.slack.AddUser(slacktest.User{ID: "U5", Email: "bob@gmail.example", EmailConfirmed: true}) // not the email engrams has
	now := time.Now()
	code := "ABCD-EFGH-IJKL-MNOP"
	if err := e.st.CreateIdentityCode(ctx, domain.IdentityCode{Hash: domain.HashLinkCode(code), OrgID: domain.FirstOrg, UserID: "u-bob",
		Kind: domain.IntegrationSlack, ExpiresAt: now.Add(15 * time.Minute), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	n := 0
	say := func(user, text string) []slacktest.Message {
		t.Helper()
		n++
		ts := e.slack.Post("C1", "", text)
		if _, err := e.deliver(t, slacktest.Event(fmt.Sprintf("EvL%d", n), map[string]string{"type": "app_mention", "user": user, "text": text,
			"ts": ts, "channel": "C1"}), now, signing); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		return e.slack.Thread("C1", ts)
	}
	if th := say("U5", "<@UBOT> fix it"); len(th) != 1 || !strings.Contains(th[0].Text, "not an engrams member") {
		t.Fatalf("before linking: %+v", th)
	}
	if th := say("U6", "<@UBOT> link WXYZ-WXYZ-WXYZ-WXYZ"); len(th) != 1 || !strings.Contains(th[0].Text, "Not linked") {
		t.Fatalf("a guessed code: %+v", th)
	}
	if th := say("U5", "<@UBOT> link abcd-efgh-ijkl-mnop"); len(th) != 1 || !strings.HasPrefix(th[0].Text, "Linked") {
		t.Fatalf("bob's code: %+v", th)
	}
	if th := say("U6", "<@UBOT> link "+code); len(th) != 1 || !strings.Contains(th[0].Text, "was used") {
		t.Fatalf("the code said again: %+v", th)
	}
	say("U5", "<@UBOT> fix it")
	runs := e.runs.Runs()
	last := runs[len(runs)-1]
	if last.Actor != "u-bob" || last.Refused != "" {
		t.Fatalf("bob's mention after linking: %+v", last)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs: link codes start none", len(runs))
	}
	if id, err := e.st.GetIdentity(ctx, domain.FirstOrg, domain.IntegrationSlack, "T1:U5"); err != nil || id.How != domain.IdentityByLink {
		t.Fatalf("bob's account: %+v %v", id, err)
	}
	if _, err := e.st.GetIdentity(ctx, domain.FirstOrg, domain.IntegrationSlack, "T1:U6"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("U6 got an account: %v", err)
	}
}

// TestMembersOfTheHoldingOrganisation: Slack accounts map to members of
// the organisation holding the Slack integration only; a member of
// another organisation mentions engrams as no one.
func TestMembersOfTheHoldingOrganisation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, map[string]any{"channels": map[string]any{"C1": "agent"}})
	ctx := t.Context()
	in, err := e.st.GetIntegration(ctx, domain.IntegrationSlack)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.DeleteIntegration(ctx, domain.FirstOrg, domain.IntegrationSlack); err != nil {
		t.Fatal(err)
	}
	in.Org = "org-b"
	if _, err := e.st.PutIntegration(ctx, in); err != nil {
		t.Fatal(err)
	}
	ts := e.slack.Post("C1", "", "<@UBOT> fix it")
	if _, err := e.deliver(t, slacktest.Event("Ev1", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> fix it",
		"ts": ts, "channel": "C1"}), time.Now(), signing); err != nil {
		t.Fatal(err)
	}
	runs := e.runs.Runs()
	if len(runs) != 1 || runs[0].Actor != "" || runs[0].Refused == "" {
		t.Fatalf("a first-organisation member's mention in org-b's Slack: %+v", runs)
	}
	if msgs := e.slack.Thread("C1", ts); len(msgs) != 1 || !strings.Contains(msgs[0].Text, "not an engrams member") {
		t.Errorf("thread %+v, want a reply saying how to get access", msgs)
	}
	if _, err := e.st.GetIdentity(ctx, "org-b", domain.IntegrationSlack, "T1:U1"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("ada's account mapped in org-b: %v", err)
	}
}
