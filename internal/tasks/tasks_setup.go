package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// taskStartWait bounds how long a task's first session may take to become
// Active (an image's base restores in seconds; a cold boot under software
// emulation takes longer).
const taskStartWait = 10 * time.Minute

// Task setup is held by the replica running it: it renews the task's
// UpdatedAt every taskSetupRenew; a setup not renewed for taskSetupStale
// (its replica died) is taken over by another replica's monitor.
const (
	taskSetupRenew = 30 * time.Second
	taskSetupStale = 2 * time.Minute
)

// setupTask prepares a task's new session: waits until it is Active,
// clones the profile's repositories and hands the pending prompt to the
// harness, then marks the task running. held is the task's UpdatedAt
// stamp this replica's claim wrote (its creation, its session's
// replacement, or a takeover): the setup renews the claim from it and
// stops if it is lost (another replica took over, or the task left
// starting: stopped). Every step is idempotent (a repository already
// cloned into the session is skipped; the prompt's outbox item id is its
// turn's), so a replica taking over runs it again from the start. A
// failure fails the task (if it is still starting) with the reason.
func (c *Tasks) setupTask(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, held time.Time) {
	ctx, cancelTimeout := context.WithTimeout(ctx, taskStartWait)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := c.renewSetup(ctx, cancel, taskID, held)
	defer stop()
	err := c.runSetup(ctx, taskID, sessionID)
	if err != nil && ctx.Err() != nil && context.Cause(ctx) == errSetupLost {
		c.log.Info("task setup given up: its claim was lost", "task_id", taskID, "err", err)
		return
	}
	if err != nil {
		c.failTask(ctx, taskID, err)
		return
	}
	if _, err := c.moveTask(ctx, taskID, domain.TaskStarting, TaskSetupDone, ""); err != nil {
		c.log.Warn("mark a prompted task running", "task_id", taskID, "err", err)
	}
	c.wake(ctx, Topic(taskID))
}

// errSetupLost cancels a setup whose claim another replica took (or whose
// task left starting).
var errSetupLost = errors.New("task setup claim lost")

func (c *Tasks) runSetup(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID) error {
	if err := c.waitActive(ctx, taskID, sessionID); err != nil {
		return err
	}
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return fmt.Errorf("get task: %w", err)
	}
	spec, err := taskSpec(t)
	if err != nil {
		return err
	}
	for _, r := range spec.Repos {
		if err := c.cloneRepo(ctx, t.Owner.OrgID, taskID, sessionID, r, spec.Repos); err != nil {
			return err
		}
	}
	if hosts, err := c.brokering.install(ctx, sessionID); err != nil {
		return err
	} else if len(hosts) > 0 {
		if _, err := c.appendTaskEvents(ctx, taskID, taskEvent(TaskEventBrokered, map[string]any{"hosts": hosts})); err != nil {
			return err
		}
	}
	turn, text, err := c.pendingPrompt(ctx, taskID, sessionID)
	if err != nil {
		return err
	}
	return c.promptHarness(ctx, taskID, sessionID, turn, text)
}

// renewSetup renews this replica's claim on a task's setup every
// taskSetupRenew until stop; when the claim is lost it cancels the setup
// (cancel, with errSetupLost). A store error is retried at the next tick.
func (c *Tasks) renewSetup(ctx context.Context, cancelSetup context.CancelCauseFunc, taskID domain.TaskID, held time.Time) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(taskSetupRenew)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := c.now()
			ok, err := c.st.ClaimTaskSetup(ctx, taskID, now, time.Time{}, held)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					c.log.Warn("renew task setup claim; retrying", "task_id", taskID, "err", err)
				}
			case !ok:
				cancelSetup(errSetupLost)
				return
			default:
				held = now
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// takeOverSetups runs the setup of every starting task whose replica
// stopped renewing it (one monitor pass; each is claimed first, so one
// replica takes each). Callers pass only passes of a replica that has been
// watching, without a failed pass, for longer than taskSetupStale.
func (c *Tasks) takeOverSetups(ctx context.Context) error {
	ts, err := c.st.ListTasks(ctx, domain.TaskFilter{States: []domain.TaskState{domain.TaskStarting}})
	if err != nil {
		return fmt.Errorf("list starting tasks: %w", err)
	}
	now := c.now()
	for _, t := range ts {
		if t.UpdatedAt.After(now.Add(-taskSetupStale)) || t.SessionID == "" {
			continue
		}
		ok, err := c.st.ClaimTaskSetup(ctx, t.ID, now, now.Add(-taskSetupStale), time.Time{})
		if err != nil {
			return fmt.Errorf("claim setup of task %s: %w", t.ID, err)
		}
		if !ok {
			continue
		}
		c.log.Warn("taking over a task setup nobody renewed", "task_id", t.ID, "session_id", t.SessionID, "since", t.UpdatedAt)
		c.goTask(func(bg context.Context) { c.setupTask(bg, t.ID, t.SessionID, now) })
	}
	return nil
}

// waitActive waits until a task's new session is Active; it fails once
// the session can no longer become Active, and does not resume a
// suspended session of a task that is no longer starting (stopped).
func (c *Tasks) waitActive(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID) error {
	settled := func(s domain.Session) bool {
		return s.State == domain.SessionActive || s.State == domain.SessionIdle || s.State == domain.SessionDeleting || s.State.Terminal()
	}
	for {
		s, err := c.sessions.WaitSession(ctx, sessionID, settled)
		if err != nil {
			return fmt.Errorf("session %s did not become active (it is %s): %w", sessionID, s.State, err)
		}
		switch {
		case s.State == domain.SessionActive:
			return nil
		case s.State.Terminal() || s.State == domain.SessionDeleting:
			return fmt.Errorf("session %s is %s: %s", sessionID, s.State, s.Reason)
		case s.State == domain.SessionIdle:
			if t, err := c.st.GetTask(ctx, taskID); err == nil && t.State != domain.TaskStarting {
				return fmt.Errorf("%w: task %s is %s", domain.ErrNotActive, taskID, t.State)
			}
			_, err := c.sessions.EnsureActive(ctx, s)
			return err
		}
	}
}

// taskSpec reads the profile spec a task was started with, from its
// receipt.
func taskSpec(t domain.Task) (apiv1.ProfileSpec, error) {
	var r taskRecord
	if err := json.Unmarshal(t.Receipt, &r); err != nil {
		return apiv1.ProfileSpec{}, fmt.Errorf("read the receipt of task %s: %w", t.ID, err)
	}
	return r.Spec, nil
}

// taskWorkdir is where the harness works: the repository when the profile
// clones one, else the work root.
func taskWorkdir(spec apiv1.ProfileSpec) string {
	if len(spec.Repos) == 1 {
		return path.Join(WorkRoot, repoPath(spec.Repos[0]))
	}
	return WorkRoot
}

// promptHarness puts a prompt into the session's outbox (exactly once per
// turn: the item id is the turn's), with the model, mode, env and the
// session-scoped placeholders of its model and brokered credentials. An Idle session
// resumes to take it.
func (c *Tasks) promptHarness(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, turn, text string) error {
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return err
	}
	if t.State == domain.TaskStopped || t.State == domain.TaskFailed {
		return fmt.Errorf("%w: task %s is %s", domain.ErrNotActive, taskID, t.State)
	}
	spec, err := taskSpec(t)
	if err != nil {
		return err
	}
	s, err := c.st.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	p := guestapi.PromptPayload{Turn: turn, Text: text, Workdir: taskWorkdir(spec), Model: spec.Model, Mode: spec.Mode,
		Credentials: map[string]string{}}
	if p.Env, err = c.brokering.tokenEnv(ctx, s); err != nil {
		return err
	}
	for _, g := range s.Spec.Credentials {
		ph, err := c.placeholders.Placeholder(ctx, sessionID, g.Kind)
		if err != nil {
			return fmt.Errorf("placeholder for %s: %w", g.Kind, err)
		}
		p.Credentials[g.Kind] = ph
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode prompt: %w", err)
	}
	if _, err := c.sessions.PutOutbox(ctx, sessionID, "turn-"+turn, guestapi.OutboxPrompt, raw); err != nil {
		return fmt.Errorf("hand the prompt to session %s: %w", sessionID, err)
	}
	return nil
}
