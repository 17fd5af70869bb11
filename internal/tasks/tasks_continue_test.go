package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/domain"
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
	e.session(t, "s1", "host-a", domain.SessionDead, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	if _, err := e.co.appendTaskEvents(ctx, "t1",
		taskEvent(TaskEventSession, map[string]any{"session_id": "s1"}),
		taskEvent(TaskEventRepoCloned, map[string]any{"path": "app", "base": "abc"}),
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
	if tk.SessionID == "s1" || tk.SessionID == "" || tk.State != domain.TaskStarting {
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
	if ms := s.Spec; ms.Image != taskSpecFixture.Image || ms.HarnessID == "" || len(ms.Credentials) != 1 {
		t.Errorf("new session's spec %+v", ms)
	}
	evs := e.events(t, "t1")
	if got := summary(evs); len(got) != 6 || evs[4].Type != TaskEventSession || evs[5].Seq != ev.Seq {
		t.Fatalf("events %q", got)
	}
	if !strings.Contains(string(evs[4].Payload), `"previous":"s1"`) {
		t.Errorf("session event %s does not name the previous session", evs[4].Payload)
	}
	// The repository cloned into the dead session does not count for the
	// new one (its setup clones it again).
	if repos, err := e.co.taskRepos(ctx, "t1"); err != nil || len(repos) != 0 {
		t.Fatalf("repos of the new session before its clone: %+v %v", repos, err)
	}
	// A second follow-up while the task moves is refused: it would race
	// the first for the new session.
	if _, err := e.co.SendTask(ctx, "t1", "again"); !errors.Is(err, domain.ErrBusy) {
		t.Fatalf("a follow-up while the task starts again: %v, want domain.ErrBusy", err)
	}
}

// TestContinueAfterConcurrentStop: a stop that lands between a follow-up's
// read of the task and its move to a new session is never undone: the
// follow-up is refused, the task stays stopped in its old session and the
// session made for it is deleted.
func TestContinueAfterConcurrentStop(t *testing.T) {
	t.Parallel()
	e := agentTaskEnv(t)
	ctx := context.Background()
	old := e.session(t, "s1", "host-a", domain.SessionDead, domain.SessionSpec{})
	read := e.task(t, "t1", "s1", domain.TaskIdle, "")
	if _, err := e.co.StopTask(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.co.continueTask(ctx, read, old, "go on"); !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("a follow-up racing a stop: %v, want domain.ErrConflict saying stopped", err)
	}
	if tk := e.getTask(t, "t1"); tk.State != domain.TaskStopped || tk.SessionID != "s1" {
		t.Fatalf("the stop was undone: %+v", tk)
	}
	ss, err := e.st.ListSessions(ctx, domain.SessionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.ID != "s1" && s.DesiredState != domain.DesireDeleted {
			t.Errorf("the refused follow-up's session %s is left %s (desired %s)", s.ID, s.State, s.DesiredState)
		}
	}
}

func TestTranscript(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", domain.SessionDead, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	long := strings.Repeat("é", maxTranscriptBytes) // two bytes a rune: the cut lands inside runes
	if _, err := e.co.appendTaskEvents(ctx, "t1",
		taskEvent(TaskEventPrompt, map[string]any{"text": "first"}),
		taskEvent("tool_call", map[string]any{"name": "Write"}),
		taskEvent("assistant_text", map[string]any{"text": "done"})); err != nil {
		t.Fatal(err)
	}
	if got := transcript(e.events(t, "t1")); got != "User: first\n\nAssistant: done" {
		t.Fatalf("transcript %q", got)
	}
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventPrompt, map[string]any{"text": long})); err != nil {
		t.Fatal(err)
	}
	if got := transcript(e.events(t, "t1")); !strings.HasPrefix(got, "[earlier turns left out]") || strings.Contains(got, "first") || !utf8.ValidString(got) {
		t.Fatalf("long transcript: %d bytes", len(got))
	}
}

// TestPendingPrompt: a task's first session gets its prompt as is; a
// session continuing the task gets it led by the conversation so far.
func TestPendingPrompt(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskStarting, "")
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventSession, map[string]any{"session_id": "s1"}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": "a", "text": "create hello.txt"})); err != nil {
		t.Fatal(err)
	}
	if turn, text, err := e.co.pendingPrompt(ctx, "t1", "s1"); err != nil || turn != "a" || text != "create hello.txt" {
		t.Fatalf("first session: %q %q %v", turn, text, err)
	}
	if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent("assistant_text", map[string]any{"text": "Created it."}),
		taskEvent(TaskEventSession, map[string]any{"session_id": "s2"}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": "b", "text": "what did you create?"})); err != nil {
		t.Fatal(err)
	}
	turn, text, err := e.co.pendingPrompt(ctx, "t1", "s2")
	if err != nil || turn != "b" || !strings.Contains(text, "User: create hello.txt\n\nAssistant: Created it.") ||
		!strings.HasSuffix(text, "The user's new message:\n\nwhat did you create?") {
		t.Fatalf("continuing session: %q %q %v", turn, text, err)
	}
	// The first session still gets its own prompt (a setup taken over late).
	if turn, _, err := e.co.pendingPrompt(ctx, "t1", "s1"); err != nil || turn != "a" {
		t.Fatalf("first session again: %q %v", turn, err)
	}
	if _, _, err := e.co.pendingPrompt(ctx, "t1", "s9"); err == nil {
		t.Fatal("a session the task never recorded has a pending prompt")
	}
	e.task(t, "t2", "s1", domain.TaskStarting, "")
	if _, err := e.co.appendTaskEvents(ctx, "t2", taskEvent(TaskEventSession, map[string]any{"session_id": "s1"})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.co.pendingPrompt(ctx, "t2", "s1"); err == nil {
		t.Fatal("a task without a prompt has a pending prompt")
	}
}

// TestTakeOverSetups: a starting task whose setup nobody renewed for
// taskSetupStale is claimed by a monitor pass and set up again (here the
// repository is already cloned into the session, so the prompt goes to
// its outbox); one renewed recently is left to its replica.
func TestTakeOverSetups(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	for _, id := range []domain.TaskID{"stale", "fresh"} {
		sid := domain.SessionID("s-" + id)
		e.session(t, sid, "host-a", domain.SessionActive, domain.SessionSpec{})
		e.task(t, id, sid, domain.TaskStarting, "")
		if _, err := e.co.appendTaskEvents(ctx, id, taskEvent(TaskEventSession, map[string]any{"session_id": sid}),
			taskEvent(TaskEventPrompt, map[string]any{"turn": "turn-of-" + string(id), "text": "hi"}),
			taskEvent(TaskEventRepoCloned, map[string]any{"path": "app", "base": "abc"})); err != nil {
			t.Fatal(err)
		}
		if id == "stale" {
			e.advance(taskSetupStale + time.Second) // "fresh" is created after this
		}
	}
	if err := e.co.takeOverSetups(ctx); err != nil {
		t.Fatal(err)
	}
	e.co.tasksWG.Wait()
	items, err := e.st.ListOutbox(ctx, "s-stale", 0, 0)
	if err != nil || len(items) != 1 || items[0].ID != "turn-turn-of-stale" {
		t.Fatalf("outbox of the taken-over task: %+v %v", items, err)
	}
	if items, _ := e.st.ListOutbox(ctx, "s-fresh", 0, 0); len(items) != 0 {
		t.Fatalf("a setup renewed recently was taken over: %+v", items)
	}
	if got := e.getTask(t, "stale"); !got.UpdatedAt.Equal(e.clock()) {
		t.Errorf("the claim did not stamp the task: updated %s, now %s", got.UpdatedAt, e.clock())
	}
}

// TestRewindHarnessCursor: resuming a session from a snapshot lowers its
// task's cursor to the snapshot's harness event head (the lost
// incarnation's later events were relayed; the restored guest writes new
// ones under the same seqs), never raises it, and ignores snapshots whose
// head is unknown.
func TestRewindHarnessCursor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		harnessSeq int64
		cursor     int64
		want       int64
	}{
		{"lost incarnation relayed past the snapshot", 5, 9, 5},
		{"suspend: the cursor is at the snapshot", 9, 9, 9},
		{"cursor below the snapshot", 9, 4, 4},
		{"unknown head", -1, 9, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
			e.task(t, "t1", "s1", domain.TaskIdle, "")
			var evs []domain.TaskEvent
			for i := int64(1); i <= tt.cursor; i++ {
				evs = append(evs, domain.TaskEvent{Type: "assistant_text", GuestSeq: i})
			}
			if _, err := e.st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: "t1", SessionID: "s1", Events: evs}); err != nil {
				t.Fatal(err)
			}
			snap := domain.Snapshot{ID: "snap-1", SessionID: "s1", HostID: "host-a", Manifests: json.RawMessage(`{}`),
				HarnessSeq: tt.harnessSeq, CreatedAt: e.clock()}
			if err := e.st.CommitSnapshot(ctx, snap, s.Epoch); err != nil {
				t.Fatal(err)
			}
			s, _ = e.st.GetSession(ctx, "s1")
			head, err := e.st.GetSnapshot(ctx, s.HeadSnapshotID)
			if err != nil {
				t.Fatal(err)
			}
			if err := (Rewinder{Store: e.st}).SessionRestored(ctx, s, head); err != nil {
				t.Fatal(err)
			}
			res, err := e.st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: "t1", SessionID: "s1"})
			if err != nil || res.Cursor != tt.want {
				t.Fatalf("cursor %d (%v), want %d", res.Cursor, err, tt.want)
			}
		})
	}
}
