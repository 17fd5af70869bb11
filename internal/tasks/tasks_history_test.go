package tasks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

// boundedReads is the store as the task service sees it in tests: a read
// of a task's conversation that is not one bounded page (a limit of 1 to
// taskEventPage) fails the test and the read, so no path of the service
// can load a whole conversation.
type boundedReads struct {
	store.Store
	t testing.TB

	mu    sync.Mutex
	reads int // pages read
	most  int // the largest page asked for
}

func (b *boundedReads) check(what string, limit int) error {
	b.mu.Lock()
	b.reads++
	b.most = max(b.most, limit)
	b.mu.Unlock()
	if limit < 1 || limit > taskEventPage {
		b.t.Errorf("%s with limit %d: not a bounded page (1 to %d)", what, limit, taskEventPage)
		return fmt.Errorf("%s with limit %d: unbounded read refused by the test store", what, limit)
	}
	return nil
}

func (b *boundedReads) ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error) {
	if err := b.check("ListTaskEvents", limit); err != nil {
		return nil, err
	}
	return b.Store.ListTaskEvents(ctx, taskID, afterSeq, limit)
}

func (b *boundedReads) QueryTaskEvents(ctx context.Context, taskID domain.TaskID, q store.TaskEventQuery) ([]domain.TaskEvent, error) {
	if err := b.check("QueryTaskEvents", q.Limit); err != nil {
		return nil, err
	}
	return b.Store.QueryTaskEvents(ctx, taskID, q)
}

// pages reports the pages read since the last call and the largest asked.
func (b *boundedReads) pages() (reads, most int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	reads, most = b.reads, b.most
	b.reads, b.most = 0, 0
	return reads, most
}

// longConversation appends to t1 its first session and prompt, then n
// answers of 300 bytes with tool calls between them, one repository clone
// in the middle, and more tool calls after it: several pages of each.
func longConversation(t *testing.T, e *taskEnv, n int) {
	t.Helper()
	ctx := context.Background()
	evs := []domain.TaskEvent{taskEvent(TaskEventSession, map[string]any{"session_id": "s1"}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": "a", "text": "start"})}
	for i := range n {
		evs = append(evs, taskEvent(guestapi.EventAssistantText, map[string]any{"text": fmt.Sprintf("%03d %s", i, strings.Repeat("x", 296))}),
			taskEvent(guestapi.EventToolCall, map[string]any{"name": "Bash"}))
		if i == n/2 {
			evs = append(evs, taskEvent(TaskEventRepoCloned, map[string]any{"path": "app", "url": "https://h/app.git", "base": "b1"}))
		}
	}
	for range 3 * taskEventPage {
		evs = append(evs, taskEvent(guestapi.EventToolResult, map[string]any{"output": "ok"}))
	}
	if _, err := e.st.AppendTaskEvents(ctx, "t1", evs); err != nil {
		t.Fatal(err)
	}
}

// TestConversationReadsArePaged: setup (repositories already cloned, the
// pending prompt), diff and a follow-up in a new session read a long
// conversation a bounded page at a time and get what the whole of it
// says.
func TestConversationReadsArePaged(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	ctx := context.Background()
	e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	longConversation(t, e, 3*taskEventPage)
	check := func(what string, wantPages int) {
		t.Helper()
		reads, most := e.reads.pages()
		if most > taskEventPage || reads < wantPages {
			t.Errorf("%s read %d pages of at most %d events, want at least %d pages of at most %d", what, reads, most, wantPages, taskEventPage)
		}
	}

	if done, err := e.co.repoCloned(ctx, "t1", "app"); err != nil || !done {
		t.Fatalf("setup: app cloned = %v, %v", done, err)
	}
	check("setup's clone check", 2)
	if turn, text, err := e.co.pendingPrompt(ctx, "t1", "s1"); err != nil || turn != "a" || text != "start" {
		t.Fatalf("setup's prompt: %q %q %v", turn, text, err)
	}
	check("setup's prompt", 2)
	diffs, err := e.co.TaskDiff(ctx, "t1")
	if err != nil || len(diffs) != 1 || diffs[0].Path != "app" || diffs[0].Base != "b1" {
		t.Fatalf("diff: %+v %v", diffs, err)
	}
	check("diff", 2)

	// A follow-up in a new session: its prompt carries the newest 32 KiB
	// of the conversation, as the whole conversation gives it.
	at := e.getTask(t, "t1").EventSeq + 1
	if _, err := e.st.AppendTaskEvents(ctx, "t1", []domain.TaskEvent{taskEvent(TaskEventSession, map[string]any{"session_id": "s2"}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": "b", "text": "again"})}); err != nil {
		t.Fatal(err)
	}
	all := e.events(t, "t1")
	before := transcript(all[:at-1])
	if !strings.HasPrefix(before, "[earlier turns left out]") {
		t.Fatalf("the fixture's transcript is not cut: %d bytes", len(before))
	}
	turn, text, err := e.co.pendingPrompt(ctx, "t1", "s2")
	if err != nil || turn != "b" || !strings.Contains(text, "The conversation so far:\n\n"+before+"\n\nThe user's new message:\n\nagain") {
		t.Fatalf("follow-up's prompt: %q, %d bytes, %v", turn, len(text), err)
	}
	check("follow-up's prompt", 3)
	if repos, err := e.co.taskRepos(ctx, "t1"); err != nil || len(repos) != 0 {
		t.Fatalf("repos of the new session: %+v %v", repos, err)
	}
}

// TestRecentTranscript: reading the conversation backwards gives what
// transcript of all of it gives, at every length around the cut.
func TestRecentTranscript(t *testing.T) {
	t.Parallel()
	line := len("Assistant: ") + 300 + len("\n\n")
	// exact is a conversation whose last two lines are exactly n bytes
	// long together, after an earlier first prompt.
	exact := func(n int) []domain.TaskEvent {
		b := strings.Repeat("b", 1000)
		a := strings.Repeat("a", n-len("User: ")-len("\n\n")-len("Assistant: ")-len(b))
		return []domain.TaskEvent{taskEvent(TaskEventPrompt, map[string]any{"text": "first"}),
			taskEvent(TaskEventPrompt, map[string]any{"text": a}), taskEvent(guestapi.EventAssistantText, map[string]any{"text": b})}
	}
	tests := []struct {
		name string
		long int                // answers of longConversation
		evs  []domain.TaskEvent // else these
	}{
		{name: "none"}, {name: "one", long: 1}, {name: "two", long: 2},
		{name: "a line under the cut", long: maxTranscriptBytes/line - 1}, {name: "at the cut", long: maxTranscriptBytes / line},
		{name: "a line over the cut", long: maxTranscriptBytes/line + 1}, {name: "pages of it", long: 2 * taskEventPage},
		{name: "the last two lines fill it exactly", evs: exact(maxTranscriptBytes)},
		{name: "the last two lines are a byte over", evs: exact(maxTranscriptBytes + 1)},
		{name: "the last two lines are a byte under", evs: exact(maxTranscriptBytes - 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			e.task(t, "t1", "s1", domain.TaskIdle, "")
			if tt.evs != nil {
				if _, err := e.st.AppendTaskEvents(ctx, "t1", tt.evs); err != nil {
					t.Fatal(err)
				}
			} else {
				longConversation(t, e, tt.long)
			}
			all := e.events(t, "t1")
			got, err := e.co.recentTranscript(ctx, "t1", int64(len(all)+1))
			if want := transcript(all); err != nil || got != want {
				t.Fatalf("recent transcript: %d bytes %.60q (%v), want %d bytes %.60q", len(got), got, err, len(want), want)
			}
		})
	}
}
