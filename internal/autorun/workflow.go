package autorun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// stepResult is what DBOS checkpoints of a block: its output and, when it
// failed, why. A failed block is a recorded outcome, not a step error, so
// a replay takes the same path without running the block again.
type stepResult struct {
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

// blockError is a block that failed: it ends the run.
type blockError struct {
	path, msg string
}

func (e *blockError) Error() string { return e.path + ": " + e.msg }

// runWorkflow is the durable body of a run: DBOS replays its completed
// steps from their checkpoints and runs the rest, so a run a replica
// dropped resumes after its last completed block.
func (r *Runner) runWorkflow(ctx dbos.Context, runID string) (string, error) {
	run, err := r.st.GetRun(ctx, domain.AutomationRunID(runID))
	if err != nil {
		return "", fmt.Errorf("read run %s: %w", runID, err)
	}
	if run.State.Terminal() {
		return string(run.State), nil
	}
	def, err := r.definition(ctx, run.AutomationID, run.Version)
	if err != nil {
		return "", err
	}
	var inputs map[string]any
	if err := json.Unmarshal(run.Inputs, &inputs); err != nil && len(run.Inputs) > 0 {
		return "", fmt.Errorf("decode run %s inputs: %w", runID, err)
	}
	started, err := dbos.RunAsStep(ctx, func(c context.Context) (bool, error) { return r.markStarted(c, run.ID) }, dbos.WithStepName("start"))
	if err != nil || !started {
		return string(domain.RunCancelled), err
	}
	w := &walker{r: r, ctx: ctx, run: run, inputs: inputs, outputs: map[string]string{},
		deadline: run.CreatedAt.Add(r.cfg.Limits.MaxRunLength)}
	werr := w.blocks("blocks", def.Blocks, "")
	var be *blockError
	if werr != nil && !errors.As(werr, &be) {
		return "", werr // DBOS: cancelled, or no longer this executor's
	}
	final, ev, msg := domain.RunSucceeded, automations.EventSucceed, ""
	if be != nil {
		final, ev, msg = domain.RunFailed, automations.EventFail, be.Error()
	}
	if _, err := dbos.RunAsStep(ctx, func(c context.Context) (bool, error) { return r.markEnded(c, run.ID, ev, msg) },
		dbos.WithStepName("end")); err != nil {
		return "", err
	}
	return string(final), nil
}

// markStarted moves a queued run to running; false: it ended meanwhile.
func (r *Runner) markStarted(ctx context.Context, id domain.AutomationRunID) (bool, error) {
	run, err := r.st.GetRun(ctx, id)
	if err != nil {
		return false, err
	}
	if run.State != domain.RunQueued {
		return !run.State.Terminal(), nil // running or waiting: a replay after a crash
	}
	to, err := automations.Transition(run.State, automations.EventStart)
	if err != nil {
		return false, err
	}
	now := r.now()
	moved, err := r.st.TransitionRun(ctx, id, run.State, to, store.RunPatch{StartedAt: now}, now)
	if errors.Is(err, domain.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.wake(ctx, moved)
	return true, nil
}

// markEnded records a run's end unless it ended otherwise (cancelled or
// superseded) meanwhile.
func (r *Runner) markEnded(ctx context.Context, id domain.AutomationRunID, ev automations.RunEvent, msg string) (bool, error) {
	for range 3 {
		run, err := r.st.GetRun(ctx, id)
		if err != nil {
			return false, err
		}
		if run.State == domain.RunWaiting { // a wait ended by a crash: wake it first
			run.State, err = r.moveRun(ctx, run, automations.EventWake, "")
			if err != nil {
				continue
			}
		}
		to, err := automations.Transition(run.State, ev)
		if err != nil {
			return false, nil // it ended otherwise
		}
		now := r.now()
		moved, err := r.st.TransitionRun(ctx, id, run.State, to, store.RunPatch{Error: msg, EndedAt: now}, now)
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		if err != nil {
			return false, err
		}
		r.wake(ctx, moved)
		return true, nil
	}
	return false, fmt.Errorf("run %s keeps changing state", id)
}

// moveRun applies ev to a run in its current state.
func (r *Runner) moveRun(ctx context.Context, run domain.AutomationRun, ev automations.RunEvent, msg string) (domain.RunState, error) {
	to, err := automations.Transition(run.State, ev)
	if err != nil {
		return run.State, err
	}
	moved, err := r.st.TransitionRun(ctx, run.ID, run.State, to, store.RunPatch{Error: msg}, r.now())
	if err != nil {
		return run.State, err
	}
	r.wake(ctx, moved)
	return moved.State, nil
}

// walker executes a definition's blocks in order, one DBOS step each.
type walker struct {
	r        *Runner
	ctx      dbos.Context
	run      domain.AutomationRun
	inputs   map[string]any
	outputs  map[string]string // block id -> its latest output
	seq      int64
	deadline time.Time
}

func (w *walker) values() map[string]string { return values(w.inputs, w.run.Trigger, w.outputs) }

func (w *walker) blocks(path string, bs []automations.Block, pass string) error {
	for i, b := range bs {
		if err := w.block(fmt.Sprintf("%s[%d]%s", path, i, pass), b); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) block(path string, b automations.Block) error {
	switch b.Kind {
	case automations.BlockCondition:
		out, err := w.step(path, b, func(context.Context, int64) (string, error) {
			return map[bool]string{true: "then", false: "else"}[truthy(automations.Render(b.If, w.values()))], nil
		})
		if err != nil {
			return err
		}
		if out == "then" {
			return w.blocks(path+".then", b.Then, "")
		}
		return w.blocks(path+".else", b.Else, "")
	case automations.BlockLoop:
		for pass := 1; pass <= b.Max; pass++ {
			p := fmt.Sprintf(" pass %d", pass)
			out, err := w.step(path+p, b, func(context.Context, int64) (string, error) {
				return map[bool]string{true: "continue", false: "stop"}[b.While == "" || truthy(automations.Render(b.While, w.values()))], nil
			})
			if err != nil {
				return err
			}
			if out == "stop" {
				return nil
			}
			if err := w.blocks(path+".body", b.Body, p); err != nil {
				return err
			}
		}
		return nil
	}
	out, err := w.step(path, b, func(ctx context.Context, attempt int64) (string, error) {
		return blocks{w.r}.execute(ctx, w, b, attempt)
	})
	w.outputs[b.ID] = out
	return err
}

// truthy is a condition's value: true unless "", "0" or "false".
func truthy(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && s != "0" && !strings.EqualFold(s, "false")
}

// step runs one block as a DBOS step, recording it in the run's steps:
// its rendered input, then its output or error and times.
func (w *walker) step(path string, b automations.Block, fn func(ctx context.Context, attempt int64) (string, error)) (string, error) {
	w.seq++
	seq := w.seq
	res, err := dbos.RunAsStep(w.ctx, func(ctx context.Context) (stepResult, error) {
		input, _ := json.Marshal(w.r.renderedFields(b, w.values(), w.quoteTag()))
		rec := domain.RunStep{RunID: w.run.ID, Seq: seq, BlockID: b.ID, Kind: string(b.Kind), Path: path, Input: input, StartedAt: w.r.now()}
		attempt, err := w.r.st.BeginStep(ctx, rec)
		if err != nil {
			return stepResult{}, err
		}
		_ = w.r.st.Notify(ctx, RunTopic(w.run.ID)) // a step is no change to the run list
		var out string
		var runErr error
		if w.r.now().After(w.deadline) {
			runErr = fmt.Errorf("the run is over its %s limit", w.r.cfg.Limits.MaxRunLength)
		} else {
			out, runErr = fn(ctx, attempt)
		}
		res := stepResult{Output: clip(out, w.r.cfg.MaxStepOutput)}
		rec.State, rec.Output, rec.EndedAt = domain.StepSucceeded, res.Output, w.r.now()
		if runErr != nil {
			res.Error = clip(runErr.Error(), 4096)
			rec.State, rec.Error = domain.StepFailed, res.Error
		}
		if ctx.Err() != nil {
			rec.Error = "interrupted: " + context.Cause(ctx).Error()
		}
		if err := w.r.st.EndStep(context.WithoutCancel(ctx), rec); err != nil {
			return stepResult{}, err
		}
		_ = w.r.st.Notify(ctx, RunTopic(w.run.ID))
		return res, ctx.Err()
	}, dbos.WithStepName(string(b.Kind)+":"+b.ID), dbos.WithStepMaxRetries(0))
	if err != nil {
		return "", err
	}
	if res.Error != "" {
		return res.Output, &blockError{path: path + " (" + b.ID + ")", msg: res.Error}
	}
	return res.Output, nil
}

// clip keeps at most n bytes of s, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// renderedFields are a block's set text fields as rendered for this run:
// the step record's input.
func (r *Runner) renderedFields(b automations.Block, vals map[string]string, q quoting) map[string]string {
	out := map[string]string{}
	for k, v := range r.fields(b, vals, q) {
		out[k] = clip(v, 4096)
	}
	for k, v := range b.Env {
		out["env."+k] = clip(automations.Render(v, vals), 4096)
	}
	return out
}

// blockFields are a block's set text fields by name (its templates).
func blockFields(b automations.Block) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"profile": b.Profile, "task": b.Task, "prompt": b.Prompt, "command": b.Command, "path": b.Path,
		"content": b.Content, "channel": b.Channel, "repo": b.Repo, "number": b.Number, "issue": b.Issue, "title": b.Title,
		"ref": b.Ref, "text": b.Text, "timeout": b.Timeout, "if": b.If, "while": b.While} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}
