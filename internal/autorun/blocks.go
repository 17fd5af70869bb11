package autorun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/tasks"
)

// ErrNoIntegration is a block's error when no integration executes its
// kind, or the one that does is not configured.
var ErrNoIntegration = connector.ErrNotConfigured

// blocks executes the blocks that are not control flow, over the
// Runner's collaborators.
type blocks struct{ *Runner }

// defaultWait is a wait_idle's deadline when it names none.
const defaultWait = 30 * time.Minute

// execute runs one block that is not control flow and returns its output.
// attempt is 2 or more when the block ran before and its replica died
// before recording the end: blocks with side effects make them once.
func (r blocks) execute(ctx context.Context, w *walker, b automations.Block, attempt int64) (string, error) {
	vals := w.values()
	f := r.fields(b, vals, w.quoteTag())
	switch b.Kind {
	case automations.BlockStartTask:
		return r.startTask(ctx, w, tasks.StartTaskRequest{Profile: f["profile"], Prompt: f["prompt"], Title: automations.Render(b.Prompt, vals)})
	case automations.BlockSendPrompt:
		return r.sendPrompt(ctx, w.taskOf(b), f["prompt"], attempt)
	case automations.BlockWaitIdle:
		return r.waitIdle(ctx, w, b)
	case automations.BlockRunCommand:
		return r.runCommand(ctx, w.taskOf(b), b.Command, commandEnv(b.Env, vals))
	case automations.BlockReadFile:
		return r.readFile(ctx, w.taskOf(b), f["path"])
	case automations.BlockWriteFile:
		return r.writeFile(ctx, w.taskOf(b), f["path"], f["content"])
	case automations.BlockEndSession:
		t, err := r.tasks.StopTask(ctx, w.taskOf(b))
		if err != nil {
			return "", fmt.Errorf("stop task %s: %w", w.taskOf(b), err)
		}
		return string(t.State), nil
	}
	in, ok := r.kinds[string(b.Kind)]
	if !ok {
		return "", fmt.Errorf("%w: no integration on this server executes %s blocks", ErrNoIntegration, b.Kind)
	}
	return in.Execute(ctx, connector.Call{Kind: string(b.Kind), Fields: f, Task: w.taskOf(b),
		Run: connector.Run{ID: w.run.ID, Trigger: w.run.TriggerKind, Payload: w.run.Trigger}, Key: fmt.Sprintf("step/%s/%d", w.run.ID, w.seq)})
}

// fields are b's set text fields rendered as the block uses them: a
// prompt with what came from outside quoted, an integration's fields with
// values escaped for where it posts them, a command as written (its
// values come in its env).
func (r *Runner) fields(b automations.Block, vals map[string]string, q quoting) map[string]string {
	in := r.kinds[string(b.Kind)]
	out := map[string]string{}
	for name, tmpl := range blockFields(b) {
		switch {
		case name == "prompt":
			out[name] = q.prompt(tmpl, vals)
		case name == "command":
			out[name] = tmpl
		case in != nil:
			out[name] = automations.RenderQuoted(tmpl, vals, func(_, v string) string { return in.Escape(name, v) })
		default:
			out[name] = automations.Render(tmpl, vals)
		}
	}
	return out
}

// quoting is how one step's prompt quotes what came from outside: in
// which element, and whether the run's inputs came from outside too.
type quoting struct {
	tag           string
	inputsOutside bool
}

// quoteTag is the step's quoting: its element's nonce is made from the
// run and the step, so the prompt rendered again (the step record, an
// attempt after a crash) is the same; a webhook's inputs came with the
// delivery.
func (w *walker) quoteTag() quoting {
	sum := sha256.Sum256([]byte(string(w.run.ID) + "/" + strconv.FormatInt(w.seq, 10)))
	return quoting{tag: connector.QuoteTag(hex.EncodeToString(sum[:4])),
		inputsOutside: w.run.TriggerKind != string(automations.TriggerManual) && w.run.TriggerKind != string(automations.TriggerSchedule)}
}

// prompt renders a prompt template: what came from outside (the trigger's
// payload: a pull request's title, a chat message; a webhook's inputs) is
// quoted as such, and the prompt then says what the quoting means.
func (q quoting) prompt(tmpl string, vals map[string]string) string {
	quoted := false
	out := automations.RenderQuoted(tmpl, vals, func(ref, v string) string {
		if !strings.HasPrefix(ref, "trigger.") && !(q.inputsOutside && strings.HasPrefix(ref, "inputs.")) {
			return v
		}
		s, did := connector.Quote(q.tag, ref, v)
		quoted = quoted || did
		return s
	})
	if quoted {
		return out + "\n\n" + connector.QuoteNote(q.tag)
	}
	return out
}

// commandEnv renders a run_command's env: values reach the command as
// variables, never as its text (NUL, which no variable holds, is dropped).
func commandEnv(env map[string]string, vals map[string]string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, tmpl := range env {
		out[k] = strings.ReplaceAll(automations.Render(tmpl, vals), "\x00", "")
	}
	return out
}

// taskOf is the task a block names: the output of its start_task block.
func (w *walker) taskOf(b automations.Block) domain.TaskID { return domain.TaskID(w.outputs[b.Task]) }

// startTask starts the block's task under an id made from the run and the
// step, so a block run again after a crash finds the task it started. Its
// title is its prompt's first line as written, without the quoting. An
// integration that grants profiles (Slack's channels) is asked first.
// The integrations that follow their runs' tasks (Slack's thread) hear of it.
// grantee is the member user of org as one who asks to use a profile; a
// person who is no longer a member uses none.
func (r blocks) grantee(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Grantee, error) {
	m, err := r.st.GetMember(ctx, org, user)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Grantee{}, fmt.Errorf("%w: %s, who started the run, is no longer a member", domain.ErrInvalid, user)
	}
	if err != nil {
		return domain.Grantee{}, fmt.Errorf("the run's starter: %w", err)
	}
	return domain.Grantee{OrgID: org, UserID: user, Groups: m.Groups, Curator: m.Role.AtLeast(domain.RoleAdmin)}, nil
}

func (r blocks) startTask(ctx context.Context, w *walker, req tasks.StartTaskRequest) (string, error) {
	ns, err := uuid.Parse(string(w.run.ID))
	if err != nil {
		ns = uuid.NameSpaceURL
	}
	req.ID = domain.TaskID(uuid.NewSHA1(ns, []byte(string(w.run.ID)+"/"+strconv.FormatInt(w.seq, 10))).String())
	req.RunID = w.run.ID
	// A run's task is the person's who caused it (their mention, pull
	// request or issue, or their start by hand); else the organisation's,
	// shared with its members.
	req.Owner = domain.Owner{OrgID: w.run.Org, UserID: w.run.ActorID, Shared: w.run.ActorID == ""}
	if w.run.TriggerKind == string(automations.TriggerManual) && w.run.ActorID != "" {
		// Started by hand: the profile (which the run's inputs may name)
		// is the starter's to use, as if they started the task.
		if req.Grantee, err = r.grantee(ctx, w.run.Org, w.run.ActorID); err != nil {
			return "", err
		}
	}
	run := connector.Run{ID: w.run.ID, Trigger: w.run.TriggerKind, Payload: w.run.Trigger}
	for _, in := range r.ins {
		if g, ok := in.(connector.ProfileGate); ok {
			if err := g.AllowProfile(ctx, run, req.Profile); err != nil {
				return "", err
			}
		}
	}
	t, err := r.tasks.StartTask(ctx, req)
	if err != nil {
		return "", fmt.Errorf("start a task on profile %s: %w", req.Profile, err)
	}
	for _, in := range r.ins {
		if f, ok := in.(connector.TaskFollower); ok {
			if err := f.TaskStarted(ctx, run, t.ID); err != nil {
				return string(t.ID), fmt.Errorf("follow task %s: %w", t.ID, err)
			}
		}
	}
	return string(t.ID), nil
}

// sendPrompt sends a follow-up. On a later attempt it first looks for the
// prompt in the task's conversation: the earlier attempt may have sent it.
func (r blocks) sendPrompt(ctx context.Context, id domain.TaskID, text string, attempt int64) (string, error) {
	if id == "" {
		return "", errors.New("no task: its start_task block has not run")
	}
	if attempt > 1 {
		turn, err := r.scanTurns(ctx, id)
		if err != nil {
			return "", err
		}
		if turn.lastPrompt == text {
			return "sent", nil
		}
	}
	if _, err := r.tasks.SendTask(ctx, id, text); err != nil {
		return "", fmt.Errorf("send to task %s: %w", id, err)
	}
	return "sent", nil
}

// turns is what a scan of a task's conversation found.
type turns struct {
	prompts, idles int
	lastPrompt     string
	result         string // the last idle's final text
	texts          []string
}

// scanTurns reads a task's whole conversation, a page at a time.
func (r blocks) scanTurns(ctx context.Context, id domain.TaskID) (turns, error) {
	var t turns
	for after := int64(0); ; {
		evs, err := r.reads.ListTaskEvents(ctx, id, after, 500)
		if err != nil {
			return t, fmt.Errorf("read task %s: %w", id, err)
		}
		for _, ev := range evs {
			t.add(ev)
			after = ev.Seq
		}
		if len(evs) < 500 {
			return t, nil
		}
	}
}

func (t *turns) add(ev domain.TaskEvent) {
	switch ev.Type {
	case tasks.TaskEventPrompt:
		var p struct{ Text string }
		_ = json.Unmarshal(ev.Payload, &p)
		t.prompts++
		t.lastPrompt, t.texts = p.Text, nil
	case guestapi.EventAssistantText:
		var a guestapi.AssistantTextData
		if json.Unmarshal(ev.Payload, &a) == nil && len(t.texts) < 1000 {
			t.texts = append(t.texts, a.Text)
		}
	case guestapi.EventIdle:
		var d guestapi.IdleData
		_ = json.Unmarshal(ev.Payload, &d)
		t.idles++
		t.result = d.Result
		if t.result == "" {
			t.result = strings.Join(t.texts, "")
		}
	}
}

// waitIdle waits until every prompt the task was given has ended its turn
// and returns the last turn's final text. The run shows as waiting.
func (r blocks) waitIdle(ctx context.Context, w *walker, b automations.Block) (string, error) {
	id := w.taskOf(b)
	if id == "" {
		return "", errors.New("no task: its start_task block has not run")
	}
	wait := defaultWait
	if b.Timeout != "" {
		d, err := time.ParseDuration(b.Timeout)
		if err != nil {
			return "", fmt.Errorf("timeout %q: %w", b.Timeout, err)
		}
		wait = d
	}
	wait = min(wait, time.Until(w.deadline))
	ctx, cancel := context.WithTimeoutCause(ctx, wait, fmt.Errorf("the task did not go idle within %s", wait))
	defer cancel()
	if run, err := r.st.GetRun(ctx, w.run.ID); err == nil && run.State == domain.RunRunning {
		_, _ = r.moveRun(ctx, run, automations.EventWait, "")
	}
	defer func() {
		if run, err := r.st.GetRun(context.WithoutCancel(ctx), w.run.ID); err == nil && run.State == domain.RunWaiting {
			_, _ = r.moveRun(context.WithoutCancel(ctx), run, automations.EventWake, "")
		}
	}()
	wake := r.reads.Subscribe(ctx, tasks.Topic(id))
	for {
		t, err := r.reads.GetTask(ctx, id)
		if err != nil {
			return "", fmt.Errorf("read task %s: %w", id, err)
		}
		switch t.State {
		case domain.TaskFailed, domain.TaskStopped:
			return "", fmt.Errorf("task %s is %s %s", id, t.State, t.Error)
		case domain.TaskIdle:
			turn, err := r.scanTurns(ctx, id)
			if err != nil {
				return "", err
			}
			if turn.idles >= turn.prompts {
				return turn.result, nil
			}
		}
		select {
		case <-ctx.Done():
			if context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
				return "", context.Cause(ctx)
			}
			return "", ctx.Err()
		case <-wake:
		case <-time.After(5 * time.Second): // wake-ups are hints; re-read now and then
		}
	}
}

// withGuest runs fn on the guest API of a task's session. A host not
// connected, or a machine paused while its host's lease lapsed (its agent,
// or the replica holding it, restarted: a run taken over after a crash
// often starts here), is waited for, bounded, and fn tried again: it did
// not reach the guest.
func (r blocks) withGuest(ctx context.Context, id domain.TaskID, fn func(*guestapi.Client) error) error {
	if id == "" {
		return errors.New("no task: its start_task block has not run")
	}
	t, err := r.setUp(ctx, id)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(hostWait)
	for {
		g, err := r.guest.Guest(ctx, t.SessionID)
		if err == nil {
			c := g.Client()
			err = fn(c)
			c.Close()
		}
		if err == nil || !(errors.Is(err, hostlink.ErrHostNotConnected) || errors.Is(err, guestapi.ErrUnavailable)) || time.Now().After(deadline) {
			return err
		}
		r.log.Info("waiting for a task's host", "task_id", id, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// setupWait bounds the wait for a task's setup (its session, its clones).
const setupWait = 15 * time.Minute

// setUp waits until a task is past its setup: its workdir exists. A
// task that failed or stopped is an error.
func (r blocks) setUp(ctx context.Context, id domain.TaskID) (domain.Task, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, setupWait, fmt.Errorf("task %s was still setting up after %s", id, setupWait))
	defer cancel()
	wake := r.reads.Subscribe(ctx, tasks.Topic(id))
	for {
		t, err := r.reads.GetTask(ctx, id)
		if err != nil {
			return t, fmt.Errorf("read task %s: %w", id, err)
		}
		switch t.State {
		case domain.TaskFailed, domain.TaskStopped:
			return t, fmt.Errorf("task %s is %s %s", id, t.State, t.Error)
		case domain.TaskStarting:
		default:
			return t, nil
		}
		select {
		case <-ctx.Done():
			return t, context.Cause(ctx)
		case <-wake:
		case <-time.After(2 * time.Second):
		}
	}
}

// hostWait bounds the wait for a task's host to reconnect.
const hostWait = 2 * time.Minute

// maxCommandOutput bounds each stream of a run_command.
const maxCommandOutput = 1 << 20

func (r blocks) runCommand(ctx context.Context, id domain.TaskID, command string, env map[string]string) (string, error) {
	var res guestapi.ExecResult
	err := r.withGuest(ctx, id, func(c *guestapi.Client) (err error) {
		res, err = c.Run(ctx, guestapi.ExecRequest{Argv: []string{"/bin/sh", "-c", command}, Env: env, Dir: "/work", TimeoutMS: 30 * 60 * 1000},
			maxCommandOutput)
		return err
	})
	if err != nil {
		return "", err
	}
	out := string(res.Stdout)
	switch {
	case res.Error != "":
		return out, errors.New(res.Error)
	case res.ExitCode != 0:
		return out, fmt.Errorf("exit status %d: %s", res.ExitCode, clip(strings.TrimSpace(string(res.Stderr)), 2048))
	}
	return out, nil
}

// maxFileBytes bounds a read_file.
const maxFileBytes = 1 << 20

func (r blocks) readFile(ctx context.Context, id domain.TaskID, path string) (string, error) {
	var b []byte
	err := r.withGuest(ctx, id, func(c *guestapi.Client) error {
		rc, err := c.Download(ctx, path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		defer rc.Close()
		if b, err = io.ReadAll(io.LimitReader(rc, maxFileBytes+1)); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(b) > maxFileBytes {
		return "", fmt.Errorf("read %s: larger than %d bytes", path, maxFileBytes)
	}
	return string(b), nil
}

func (r blocks) writeFile(ctx context.Context, id domain.TaskID, path, content string) (string, error) {
	err := r.withGuest(ctx, id, func(c *guestapi.Client) error {
		if err := c.Upload(ctx, path, 0o644, bytes.NewReader([]byte(content))); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return strconv.Itoa(len(content)), nil
}
