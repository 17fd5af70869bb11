package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// Task event types the coordinator writes itself; the others come from the
// session's harness adapter (guestapi.Event*).
const (
	TaskEventPrompt      = "prompt"       // {"turn","text"}: a user's prompt or follow-up
	TaskEventSession     = "session"      // {"session_id"}: the task's work moved to this session
	TaskEventRepoCloned  = "repo_cloned"  // {"path","url","ref","base"}
	TaskEventStopped     = "stopped"      // {"by"}
	TaskEventSetupFailed = "setup_failed" // {"message"}
	TaskEventBrokered    = "brokered"     // {"hosts"}: the guest was readied for its brokered credentials
)

// maxPromptBytes bounds one prompt.
const maxPromptBytes = 256 << 10

// WorkRoot is where a task's repositories are cloned in its session.
const WorkRoot = "/work"

// StartTaskRequest starts a task from a profile and a prompt.
type StartTaskRequest struct {
	// ID, when set, is the task's id, chosen by a caller that may ask
	// again (an automation run's block after a crash): a task with that id
	// is answered as it is, and its session is made once.
	ID      domain.TaskID
	Profile string // name or id
	Prompt  string
	Title   string                 // "" = the prompt's first line, cut
	RunID   domain.AutomationRunID // the automation run starting it; "" for a user
	// StartedBy names the user's API token; "" for a run.
	StartedBy string
	// Owner is whose the task and its sessions are: the person asking
	// (private unless shared), or for a run the organisation's.
	Owner domain.Owner
	// Grantee is who asks, whose grants decide the profile they may use;
	// a run without one uses its automation's curators' choice.
	Grantee domain.Grantee
}

func checkPrompt(text string) error {
	switch {
	case strings.TrimSpace(text) == "":
		return fmt.Errorf("%w: the prompt is empty", domain.ErrInvalid)
	case len(text) > maxPromptBytes:
		return fmt.Errorf("%w: the prompt has %d bytes, more than %d", domain.ErrInvalid, len(text), maxPromptBytes)
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return fmt.Errorf("%w: the prompt must be UTF-8 text without NUL bytes", domain.ErrInvalid)
	}
	return nil
}

// taskRecord is what a task keeps of its profile at start (domain.Task's
// Receipt): the spec it runs with and the grant receipt shown for it.
type taskRecord struct {
	Spec    apiv1.ProfileSpec `json:"spec"`
	Receipt apiv1.Receipt     `json:"receipt"`
}

// Topic is the store notification topic woken on every change of a task
// (its state and its conversation).
func Topic(id domain.TaskID) string { return "task:" + string(id) }

// TopicTasks is woken with every task's topic: lists of tasks (the API's
// change feed) follow it.
const TopicTasks = "tasks"

// titleOf is a task's title from its prompt: the first line, at most 80
// characters.
func titleOf(prompt string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	line = strings.TrimSpace(line) // a "\r" before the "\n", trailing spaces
	if r := []rune(line); len(r) > 80 {
		line = string(r[:79]) + "…"
	}
	return line
}

// StartTask creates a session from the profile, records the task with its
// grant receipt and first prompt, and prepares the session in the
// background (wait until it is Active, clone the repositories, hand the
// prompt to the harness). Progress shows in the task's events.
func (c *Tasks) StartTask(ctx context.Context, req StartTaskRequest) (domain.Task, error) {
	if err := checkPrompt(req.Prompt); err != nil {
		return domain.Task{}, err
	}
	if req.Profile == "" {
		return domain.Task{}, fmt.Errorf("%w: a task needs a profile", domain.ErrInvalid)
	}
	if req.Owner.OrgID == "" {
		return domain.Task{}, fmt.Errorf("%w: a task needs an owner (an organisation)", domain.ErrInvalid)
	}
	if req.ID != "" {
		if t, err := c.st.GetTask(ctx, req.ID); err == nil {
			return t, nil
		} else if !errors.Is(err, domain.ErrNotFound) {
			return domain.Task{}, err
		}
	}
	who := req.Grantee
	if req.RunID != "" && who.OrgID == "" {
		// An automation's profile was chosen by the admins who curate it
		// (a run started by hand gives its starter's grants instead).
		who = domain.Grantee{OrgID: req.Owner.OrgID, Curator: true}
	}
	if who.OrgID != req.Owner.OrgID {
		return domain.Task{}, fmt.Errorf("%w: a task's profile is of its owner's organisation", domain.ErrInvalid)
	}
	prof, spec, receipt, err := c.profiles.ResolveProfile(ctx, who, req.Profile)
	if err != nil {
		return domain.Task{}, err
	}
	mspec, err := c.taskMachineSpec(ctx, prof.Org, spec)
	if err != nil {
		return domain.Task{}, err
	}
	mspec.Owner = req.Owner
	taskID := req.ID
	if taskID == "" {
		taskID = domain.TaskID(c.newID())
	}
	s, err := c.sessions.CreateSession(ctx, mspec, "task-"+string(taskID))
	if err != nil {
		return domain.Task{}, fmt.Errorf("create the task's session: %w", err)
	}
	rec, err := json.Marshal(taskRecord{Spec: spec, Receipt: receipt})
	if err != nil {
		return domain.Task{}, fmt.Errorf("encode receipt: %w", err)
	}
	title := titleOf(cmp.Or(req.Title, req.Prompt))
	t, err := c.st.CreateTask(ctx, domain.Task{ID: taskID, ProfileID: prof.ID, ProfileVersion: prof.Version, Receipt: rec,
		Title: title, SessionID: s.ID, RunID: req.RunID, StartedBy: req.StartedBy, Owner: req.Owner, CreatedAt: c.now()})
	if err != nil {
		if req.ID != "" {
			if t, gerr := c.st.GetTask(ctx, req.ID); gerr == nil {
				return t, nil // the same request, at the same time: its session is this one's
			}
		}
		_, _ = c.sessions.DeleteSession(context.WithoutCancel(ctx), s.ID)
		return domain.Task{}, fmt.Errorf("record task: %w", err)
	}
	turn := c.newID()
	if _, err := c.appendTaskEvents(ctx, t.ID, taskEvent(TaskEventSession, map[string]any{"session_id": s.ID}),
		taskEvent(TaskEventPrompt, map[string]any{"turn": turn, "text": req.Prompt})); err != nil {
		return t, err
	}
	c.log.Info("task started", "task_id", t.ID, "session_id", s.ID, "profile", prof.Name)
	c.goTask(func(bg context.Context) { c.setupTask(bg, t.ID, s.ID, t.UpdatedAt) })
	return t, nil
}

// goTask runs fn in the background, detached from the request but joined
// by Run's shutdown.
func (c *Tasks) goTask(fn func(ctx context.Context)) {
	c.tasksWG.Add(1)
	go func() {
		defer c.tasksWG.Done()
		fn(c.runCtx())
	}()
}

func taskEvent(typ string, data any) domain.TaskEvent {
	raw, _ := json.Marshal(data)
	return domain.TaskEvent{Type: typ, Payload: raw}
}

// appendTaskEvents appends events and wakes the task's followers.
func (c *Tasks) appendTaskEvents(ctx context.Context, taskID domain.TaskID, events ...domain.TaskEvent) ([]domain.TaskEvent, error) {
	out, err := c.st.AppendTaskEvents(ctx, taskID, events)
	if err != nil {
		return nil, fmt.Errorf("append task events: %w", err)
	}
	c.wake(ctx, Topic(taskID))
	return out, nil
}

// moveTask applies ev to a task read in state from: it writes the state
// Transition gives, with msg as its error, only while the task is in a
// state ev may happen in (so a task stopped or failed meanwhile stays so),
// and reports whether it did. An event from refuses writes nothing: the
// error wraps ErrBadTransition.
func (c *Tasks) moveTask(ctx context.Context, taskID domain.TaskID, from domain.TaskState, ev StateEvent, msg string) (bool, error) {
	to, err := Transition(from, ev)
	if err != nil {
		return false, fmt.Errorf("move task %s: %w", taskID, err)
	}
	ok, err := c.st.UpdateTaskState(ctx, taskID, statesAllowing(ev), to, msg, c.now())
	if err != nil {
		return false, fmt.Errorf("move task %s to %s: %w", taskID, to, err)
	}
	return ok, nil
}

// failTask ends a task's setup: the reason is an event and the task's error.
func (c *Tasks) failTask(ctx context.Context, taskID domain.TaskID, err error) {
	// Record it even when ctx is what ran out (the start wait) or was
	// cancelled (shutdown): a task must not stay "starting" silently.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ok, uerr := c.moveTask(ctx, taskID, domain.TaskStarting, TaskSetupFailed, err.Error())
	switch {
	case uerr != nil:
		c.log.Error("record a failed task setup", "task_id", taskID, "err", err, "record_err", uerr)
		return
	case !ok: // stopped meanwhile, or already past its setup
		c.log.Info("setup of a task no longer starting ended", "task_id", taskID, "err", err)
		return
	}
	c.log.Warn("task setup failed", "task_id", taskID, "err", err)
	_, _ = c.appendTaskEvents(ctx, taskID, taskEvent(TaskEventSetupFailed, map[string]any{"message": err.Error()}))
}

// SendTask adds a follow-up prompt to a task; an Idle session resumes
// transparently to take it.
func (c *Tasks) SendTask(ctx context.Context, taskID domain.TaskID, text string) (domain.TaskEvent, error) {
	if err := checkPrompt(text); err != nil {
		return domain.TaskEvent{}, err
	}
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return domain.TaskEvent{}, err
	}
	switch t.State {
	case domain.TaskStopped, domain.TaskFailed:
		return domain.TaskEvent{}, fmt.Errorf("%w: task %s is %s", domain.ErrNotActive, taskID, t.State)
	case domain.TaskStarting:
		return domain.TaskEvent{}, fmt.Errorf("%w: task %s is still starting (its repositories are being cloned); send when it is running or idle", domain.ErrBusy, taskID)
	}
	s, err := c.st.GetSession(ctx, t.SessionID)
	if err != nil {
		return domain.TaskEvent{}, fmt.Errorf("get session %s of task %s: %w", t.SessionID, taskID, err)
	}
	if s.State.Terminal() {
		return c.continueTask(ctx, t, s, text)
	}
	turn := c.newID()
	evs, err := c.appendTaskEvents(ctx, taskID, taskEvent(TaskEventPrompt, map[string]any{"turn": turn, "text": text}))
	if err != nil {
		return domain.TaskEvent{}, err
	}
	if err := c.promptHarness(ctx, t.ID, s.ID, turn, text); err != nil {
		// The conversation says so; the caller may send it again.
		_, _ = c.appendTaskEvents(context.WithoutCancel(ctx), taskID, taskEvent(guestapi.EventError,
			map[string]any{"kind": "not_delivered", "turn": turn, "message": err.Error()}))
		return evs[0], err
	}
	return evs[0], nil
}

// StopTask interrupts the agent and marks the task stopped; its session is
// suspended, so its files stay for diff and files.
func (c *Tasks) StopTask(ctx context.Context, taskID domain.TaskID) (domain.Task, error) {
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return t, err
	}
	if _, err := Transition(t.State, TaskStopRequested); err != nil {
		return t, nil // stopped already: a second stop changes nothing
	}
	if s, err := c.st.GetSession(ctx, t.SessionID); err == nil && s.State == domain.SessionActive {
		payload, _ := json.Marshal(guestapi.InterruptPayload{})
		if _, err := c.sessions.PutOutbox(ctx, s.ID, "stop-"+string(t.ID), guestapi.OutboxInterrupt, payload); err != nil {
			c.log.Warn("interrupt the task's harness", "task_id", t.ID, "session_id", s.ID, "err", err)
		}
	}
	if _, err := c.appendTaskEvents(ctx, t.ID, taskEvent(TaskEventStopped, map[string]any{"by": "user"})); err != nil {
		return t, err
	}
	if _, err := c.moveTask(ctx, t.ID, t.State, TaskStopRequested, ""); err != nil {
		c.log.Warn("mark a task stopped", "task_id", t.ID, "err", err)
	} else {
		c.wake(ctx, Topic(t.ID))
	}
	c.goTask(func(bg context.Context) {
		if _, _, err := c.sessions.Suspend(bg, t.SessionID); err != nil && !errors.Is(err, domain.ErrNotActive) {
			c.log.Info("suspend a stopped task's session", "task_id", t.ID, "session_id", t.SessionID, "err", err)
		}
	})
	return c.st.GetTask(ctx, taskID)
}

// taskMachineSpec is the session a profile of org asks for: its image, harness,
// env, idle timeout, egress allowlist and the credentials the model gateway
// may use.
func (c *Tasks) taskMachineSpec(ctx context.Context, org domain.OrgID, spec apiv1.ProfileSpec) (domain.SessionSpec, error) {
	m := domain.SessionSpec{Image: spec.Image, Harness: spec.Harness, Env: map[string]string{}, IdleTimeoutSec: spec.IdleTimeoutS,
		Egress: slices.Clone(spec.Egress)}
	for k, v := range spec.Env {
		m.Env[k] = v
	}
	for _, name := range spec.Credentials {
		sec, err := c.st.GetSecretByName(ctx, org, name)
		if err != nil {
			return m, fmt.Errorf("credential %s of the profile: %w", name, err)
		}
		m.Credentials = append(m.Credentials, domain.CredentialGrant{Kind: sec.Kind, SecretID: sec.ID})
	}
	var err error
	if m.Brokered, err = c.brokering.grants(ctx, org, spec); err != nil {
		return m, err
	}
	for k, v := range brokeredEnv(m) {
		if _, set := m.Env[k]; !set {
			m.Env[k] = v
		}
	}
	return m, nil
}
