package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

// TestSendTaskContinuesInNewSession: a follow-up to a task whose session
// is dead starts a new session from the task's spec, attached to the task;
// the conversation records the move and the prompt, and the task starts
// again (its setup hands the harness the conversation so far).
func TestSendTaskContinuesInNewSession(t *testing.T) {
	t.Parallel()
	e := agentTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", lifecycle.Dead, hostlink.MachineSpec{})
	e.task(t, "t1", "s1", store.TaskIdle, "")
	if _, err := e.co.appendTaskEvents(ctx, "t1",
		taskEvent(TaskEventPrompt, map[string]any{"turn": "a", "text": "create hello.txt"}),
		taskEvent("assistant_text", map[string]any{"turn": "a", "text": "Created hello.txt."})); err != nil {
		t.Fatal(err)
	}
	ev, err := e.co.SendTask(ctx, "t1", "what did you create?")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct{ Turn, Text string }
	if err := json.Unmarshal(ev.Payload, &pr); err != nil || ev.Type != TaskEventPrompt || pr.Text != "what did you create?" {
		t.Fatalf("returned event %+v %s", ev, ev.Payload)
	}
	tk := e.getTask(t, "t1")
	if tk.SessionID == "s1" || tk.SessionID == "" || tk.State != store.TaskStarting {
		t.Fatalf("task after the follow-up: %+v", tk)
	}
	ss, err := e.st.ListTaskSessions(ctx, "t1")
	if err != nil || len(ss) != 2 || ss[0].SessionID != "s1" || ss[1].SessionID != tk.SessionID {
		t.Fatalf("task sessions %+v %v", ss, err)
	}
	s, err := e.st.GetSession(ctx, tk.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := Spec(s); ms.Image != taskSpecFixture.Image || ms.HarnessID == "" || len(ms.Credentials) != 1 {
		t.Errorf("new session's spec %+v", ms)
	}
	evs := e.events(t, "t1")
	if got := summary(evs); len(got) != 4 || evs[2].Type != TaskEventSession || evs[3].Seq != ev.Seq {
		t.Fatalf("events %q", got)
	}
	if !strings.Contains(string(evs[2].Payload), `"previous":"s1"`) {
		t.Errorf("session event %s does not name the previous session", evs[2].Payload)
	}
	// A repository cloned into the dead session does not count for the new one.
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventRepoCloned, map[string]any{"path": "app"})); err != nil {
		t.Fatal(err)
	}
	repos, err := e.co.taskRepos(ctx, "t1")
	if err != nil || len(repos) != 1 {
		t.Fatalf("repos of the current session: %+v %v", repos, err)
	}
}

func TestTranscript(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", lifecycle.Dead, hostlink.MachineSpec{})
	e.task(t, "t1", "s1", store.TaskIdle, "")
	long := strings.Repeat("é", maxTranscriptBytes) // two bytes a rune: the cut lands inside runes
	if _, err := e.co.appendTaskEvents(ctx, "t1",
		taskEvent(TaskEventPrompt, map[string]any{"text": "first"}),
		taskEvent("tool_call", map[string]any{"name": "Write"}),
		taskEvent("assistant_text", map[string]any{"text": "done"})); err != nil {
		t.Fatal(err)
	}
	got, err := e.co.transcript(ctx, "t1")
	if err != nil || got != "User: first\n\nAssistant: done" {
		t.Fatalf("transcript %q %v", got, err)
	}
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventPrompt, map[string]any{"text": long})); err != nil {
		t.Fatal(err)
	}
	got, err = e.co.transcript(ctx, "t1")
	if err != nil || !strings.HasPrefix(got, "[earlier turns left out]") || strings.Contains(got, "first") || !utf8.ValidString(got) {
		t.Fatalf("long transcript: %d bytes, %v", len(got), err)
	}
}
