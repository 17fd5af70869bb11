package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

// maxTranscriptBytes bounds the earlier conversation a successor session's
// first prompt carries.
const maxTranscriptBytes = 32 << 10

// continueTask carries a task whose session ended (Dead: its host was lost
// before any snapshot, or its snapshot could not be restored; Completed:
// deleted) into a new session made from the spec the task started with.
// The conversation stays one: the follow-up is recorded like any other,
// the repositories are cloned again at their default state, and the
// harness, which starts a conversation of its own there, gets the
// conversation so far with the prompt (pendingPrompt).
func (c *Tasks) continueTask(ctx context.Context, t domain.Task, old domain.Session, text string) (domain.TaskEvent, error) {
	// ReplaceSession below writes the state Transition gives (starting).
	if _, err := Transition(t.State, TaskContinued); err != nil {
		return domain.TaskEvent{}, fmt.Errorf("%w: continue task %s in a new session: %w", domain.ErrConflict, t.ID, err)
	}
	spec, err := taskSpec(t)
	if err != nil {
		return domain.TaskEvent{}, err
	}
	mspec, err := c.taskMachineSpec(ctx, t.Owner.OrgID, spec)
	if err != nil {
		return domain.TaskEvent{}, err
	}
	mspec.Owner = t.Owner
	turn := c.newID()
	s, err := c.sessions.CreateSession(ctx, mspec, "task-"+string(t.ID)+"-"+turn)
	if err != nil {
		return domain.TaskEvent{}, fmt.Errorf("create a new session for task %s: %w", t.ID, err)
	}
	// Written only while the task may still continue: a stop that landed
	// since t was read is never undone.
	ts, err := c.st.ReplaceSession(ctx, t.ID, statesAllowing(TaskContinued), old.ID, s.ID, c.now())
	if err != nil {
		_, _ = c.sessions.DeleteSession(context.WithoutCancel(ctx), s.ID)
		return domain.TaskEvent{}, replaceRefused(ctx, c.st, t.ID, err)
	}
	// The task is starting in s now; its setup finds the prompt after
	// s's session event (pendingPrompt), so a failure here leaves a setup
	// that fails the task saying so, never one that sends an old prompt.
	evs, err := c.appendTaskEvents(ctx, t.ID,
		taskEvent(TaskEventSession, map[string]any{"session_id": s.ID, "previous": old.ID,
			"why": fmt.Sprintf("the previous session is %s (%s): its files are gone, the repositories are cloned again", old.State, old.Reason)}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": turn, "text": text}))
	c.log.Info("task continues in a new session", "task_id", t.ID, "session_id", s.ID, "previous_session_id", old.ID)
	c.goTask(func(bg context.Context) { c.setupTask(bg, t.ID, s.ID, ts.CreatedAt) })
	if err != nil {
		return domain.TaskEvent{}, err
	}
	return evs[1], nil
}

// replaceRefused is the error of a follow-up whose ReplaceSession failed
// with err: a task that moved on meanwhile (stopped) is a conflict, one
// that another follow-up is moving is busy.
func replaceRefused(ctx context.Context, st interface {
	GetTask(context.Context, domain.TaskID) (domain.Task, error)
}, id domain.TaskID, err error) error {
	if !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("move task %s to a new session: %w", id, err)
	}
	if cur, gerr := st.GetTask(ctx, id); gerr == nil {
		if _, terr := Transition(cur.State, TaskContinued); terr != nil && cur.State != domain.TaskStarting {
			return fmt.Errorf("%w: task %s is %s: it takes no follow-up", domain.ErrConflict, id, cur.State)
		}
	}
	return fmt.Errorf("%w: another follow-up is already moving task %s to a new session", domain.ErrBusy, id)
}

// pendingPrompt is the prompt session sessionID is to get: the last
// prompt between that session's session event and the next one's, and its text; in a session
// that continues the task (a session event came before), the text is led
// by the conversation so far, which the harness there never saw.
func (c *Tasks) pendingPrompt(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID) (turn, text string, err error) {
	at, next, earlier, err := c.sessionEvents(ctx, taskID, sessionID)
	if err != nil {
		return "", "", err
	}
	if at == 0 {
		return "", "", fmt.Errorf("task %s has no record of its session %s", taskID, sessionID)
	}
	if turn, text, err = c.lastPrompt(ctx, taskID, at, next); err != nil {
		return "", "", err
	}
	if turn == "" {
		return "", "", fmt.Errorf("task %s has no prompt for its session %s", taskID, sessionID)
	}
	if !earlier {
		return turn, text, nil
	}
	before, err := c.recentTranscript(ctx, taskID, at)
	if err != nil {
		return "", "", err
	}
	if before != "" {
		text = "This task continues in a new sandbox: the previous one was lost with its files, and the " +
			"repositories were cloned again. The conversation so far:\n\n" + before + "\n\nThe user's new message:\n\n" + text
	}
	return turn, text, nil
}

// transcriptLine is an event's line in a transcript: a prompt or an
// answer with text.
func transcriptLine(e domain.TaskEvent) (string, bool) {
	var d struct {
		Text string `json:"text"`
	}
	if e.Type != TaskEventPrompt && e.Type != guestapi.EventAssistantText || json.Unmarshal(e.Payload, &d) != nil || d.Text == "" {
		return "", false
	}
	if e.Type == TaskEventPrompt {
		return "User: " + d.Text, true
	}
	return "Assistant: " + d.Text, true
}

// transcript is a conversation as text: its prompts and the agent's
// answers, the newest kept when it is long.
func transcript(evs []domain.TaskEvent) string {
	var lines []string
	for _, e := range evs {
		if line, ok := transcriptLine(e); ok {
			lines = append(lines, line)
		}
	}
	out := strings.Join(lines, "\n\n")
	if len(out) > maxTranscriptBytes {
		tail := out[len(out)-maxTranscriptBytes:]
		for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
			tail = tail[1:]
		}
		out = "[earlier turns left out]\n\n" + tail
	}
	return out
}
