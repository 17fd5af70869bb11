package autorun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// MaxTriggerBytes bounds a trigger's payload as kept with its run.
const MaxTriggerBytes = 256 << 10

// RunsTopic is the store topic woken when runs of an automation change;
// RunTopic one run's.
func RunsTopic(id domain.AutomationID) string   { return "automation:" + string(id) }
func RunTopic(id domain.AutomationRunID) string { return "automation_run:" + string(id) }

// RunRequest is what starts a run.
type RunRequest struct {
	Kind    automations.TriggerKind // what started it; "" is manual
	Inputs  map[string]any
	Trigger json.RawMessage // the trigger's payload, a JSON object; nil is {}
	// DedupKey names the delivery: a second request with it answers the
	// first one's run and starts nothing.
	DedupKey string
	// Actor is the person who caused the run (who started it by hand, or
	// whose mention, pull request or issue); "" for none.
	Actor domain.UserID
	// refused records the run as refused, saying why, instead of running.
	refused string
}

// Started is what StartRun answers: the run, and whether this request
// made it (false: its delivery was seen before).
type Started struct {
	Run     domain.AutomationRun
	Created bool
}

// StartRun starts a run of org's automation's current version.
func (r *Runner) StartRun(ctx context.Context, org domain.OrgID, nameOrID string, req RunRequest) (Started, error) {
	v, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return Started{}, err
	}
	return r.start(ctx, v, req)
}

// start resolves the inputs, applies the concurrency policy, records the
// run (once per dedup key) and hands it to DBOS.
func (r *Runner) start(ctx context.Context, v View, req RunRequest) (Started, error) {
	def := v.Definition
	inputs, probs := automations.ResolveInputs(def.Inputs, req.Inputs)
	if len(probs) > 0 && req.refused == "" {
		return Started{}, invalid(def.Name, probs)
	}
	payload, err := triggerPayload(req.Trigger)
	if err != nil {
		return Started{}, err
	}
	inRaw, err := json.Marshal(inputs)
	if err != nil {
		return Started{}, fmt.Errorf("%w: encode inputs: %w", domain.ErrInvalid, err)
	}
	if req.Kind == "" {
		req.Kind = automations.TriggerManual
	}
	now := r.now()
	run := domain.AutomationRun{ID: domain.AutomationRunID(r.newID()), AutomationID: v.Automation.ID, Org: v.Automation.Org, Version: v.Automation.Version,
		State: domain.RunQueued, TriggerKind: string(req.Kind), DedupKey: req.DedupKey, Trigger: payload, Inputs: inRaw, ActorID: req.Actor, CreatedAt: now}
	run.ConcurrencyKey = automations.Render(def.Settings.ConcurrencyKey, values(inputs, payload, nil))
	var active []domain.AutomationRun
	if run.ConcurrencyKey != "" && def.Settings.Policy != automations.PolicyQueue && def.Settings.Policy != "" {
		if active, err = r.st.ActiveRuns(ctx, v.Automation.ID, run.ConcurrencyKey); err != nil {
			return Started{}, err
		}
	}
	switch {
	case req.refused != "":
		run.State, run.Error, run.EndedAt = domain.RunRefused, "refused: "+req.refused, now
	case def.Settings.Policy == automations.PolicySkip && len(active) > 0:
		run.State, run.Error, run.EndedAt = domain.RunSkipped, fmt.Sprintf("run %s with key %q is running", active[0].ID, run.ConcurrencyKey), now
	}
	var caps store.RunCaps
	if req.Kind != automations.TriggerManual {
		caps.MaxActive, caps.MaxPerHour = def.Settings.Caps()
	}
	if def.Settings.Policy == automations.PolicySupersede {
		caps.Superseding = run.ConcurrencyKey // the runs it ends make room
	}
	run, created, err := r.st.CreateCappedRun(ctx, run, caps)
	if err != nil || !created || run.State.Terminal() {
		if created {
			r.recordOnly(ctx, run)
		}
		return Started{Run: run, Created: created}, err
	}
	if def.Settings.Policy == automations.PolicySupersede {
		for _, old := range active {
			if err := r.endRun(ctx, old, domain.RunSuperseded, "superseded by run "+string(run.ID)); err != nil {
				r.log.Warn("supersede a run", "run_id", old.ID, "by", run.ID, "err", err)
			}
		}
	}
	if err := r.enqueue(ctx, run, def.Settings); err != nil {
		return Started{Run: run, Created: true}, err
	}
	r.wake(ctx, run)
	r.log.Info("automation run started", "run_id", run.ID, "automation_id", run.AutomationID, "trigger", run.TriggerKind)
	return Started{Run: run, Created: true}, nil
}

// recordOnly logs a run recorded without running (skipped, refused).
func (r *Runner) recordOnly(ctx context.Context, run domain.AutomationRun) {
	r.wake(ctx, run)
	r.log.Info("automation run not started", "run_id", run.ID, "automation_id", run.AutomationID, "trigger", run.TriggerKind,
		"state", run.State, "why", run.Error)
}

// triggerPayload checks a payload is one bounded JSON object.
func triggerPayload(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if len(raw) > MaxTriggerBytes {
		return nil, fmt.Errorf("%w: the trigger payload has %d bytes, at most %d", domain.ErrInvalid, len(raw), MaxTriggerBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%w: the trigger payload must be a JSON object: %v", domain.ErrInvalid, err)
	}
	return raw, nil
}

// enqueue hands a recorded run to DBOS under the run's id, so asking
// again (a recovery, a retried start) starts nothing new. A run that
// queues behind its concurrency key goes through the keyed queue, one
// at a time per key across replicas; others start at once.
func (r *Runner) enqueue(ctx context.Context, run domain.AutomationRun, s automations.Settings) error {
	opts := []dbos.WorkflowOption{dbos.WithWorkflowID(string(run.ID))}
	if run.ConcurrencyKey != "" && (s.Policy == "" || s.Policy == automations.PolicyQueue) {
		opts = append(opts, dbos.WithQueue(r.keyedQ), dbos.WithQueuePartitionKey(run.ConcurrencyKey))
	}
	r.mu.Lock()
	launched := r.launched
	r.mu.Unlock()
	if !launched {
		return nil // the sweep at launch hands it over
	}
	if _, err := dbos.RunWorkflow(r.dbos, r.runWorkflow, string(run.ID), opts...); err != nil {
		return fmt.Errorf("start the workflow of run %s: %w", run.ID, err)
	}
	return nil
}

// sweepGrace is how old a queued run must be before a sweep hands it to
// DBOS again: its starter had that long to do it.
const sweepGrace = 30 * time.Second

// sweepQueued hands DBOS the queued runs recorded before createdBefore
// whose starter may have died between recording and handing over; a run
// DBOS has already is left as it is (its workflow id is taken).
func (r *Runner) sweepQueued(ctx context.Context, createdBefore time.Time) {
	runs, err := r.st.QueuedRuns(ctx, createdBefore, 100)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list queued runs", "err", err)
		}
		return
	}
	for _, run := range runs {
		def, err := r.definition(ctx, run.AutomationID, run.Version)
		if err == nil {
			err = r.enqueue(ctx, run, def.Settings)
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("hand a queued run over", "run_id", run.ID, "err", err)
		}
	}
}

// CancelRun cancels a run that has not ended.
func (r *Runner) CancelRun(ctx context.Context, org domain.OrgID, id domain.AutomationRunID) (domain.AutomationRun, error) {
	run, err := r.orgRun(ctx, org, id)
	if err != nil {
		return run, err
	}
	if run.State.Terminal() {
		return run, fmt.Errorf("%w: run %s is %s", domain.ErrConflict, id, run.State)
	}
	if err := r.endRun(ctx, run, domain.RunCancelled, "cancelled by a user"); err != nil {
		return run, err
	}
	return r.st.GetRun(ctx, id)
}

// endRun moves a run that has not ended to state (cancelled or
// superseded) and cancels its workflow wherever it runs.
func (r *Runner) endRun(ctx context.Context, run domain.AutomationRun, state domain.RunState, why string) error {
	ev := map[domain.RunState]automations.RunEvent{domain.RunCancelled: automations.EventCancel, domain.RunSuperseded: automations.EventSupersede}[state]
	for range 3 {
		to, err := automations.Transition(run.State, ev)
		if err != nil {
			return fmt.Errorf("%w: %w", domain.ErrConflict, err)
		}
		now := r.now()
		moved, err := r.st.TransitionRun(ctx, run.ID, run.State, to, store.RunPatch{Error: why, EndedAt: now}, now)
		if errors.Is(err, domain.ErrConflict) { // it moved meanwhile: try from where it is
			if run, err = r.st.GetRun(ctx, run.ID); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := dbos.CancelWorkflow(r.dbos, string(run.ID)); err != nil && !errors.Is(err, dbos.ErrNonExistentWorkflow) {
			r.log.Warn("cancel a run's workflow", "run_id", run.ID, "err", err)
		}
		r.wake(ctx, moved)
		return nil
	}
	return fmt.Errorf("%w: run %s keeps changing state", domain.ErrConflict, run.ID)
}

// wake tells the run's and the automation's followers it changed.
func (r *Runner) wake(ctx context.Context, run domain.AutomationRun) {
	_ = r.st.Notify(ctx, RunTopic(run.ID))
	_ = r.st.Notify(ctx, RunsTopic(run.AutomationID))
}

// orgRun reads org's run id; another organisation's is not found, as
// one that does not exist.
func (r *Runner) orgRun(ctx context.Context, org domain.OrgID, id domain.AutomationRunID) (domain.AutomationRun, error) {
	run, err := r.st.GetRun(ctx, id)
	if err == nil && (org == "" || run.Org != org) {
		return domain.AutomationRun{}, fmt.Errorf("get run %s: %w", id, domain.ErrNotFound)
	}
	return run, err
}

// Runs lists org's automation's runs, newest first.
func (r *Runner) Runs(ctx context.Context, org domain.OrgID, nameOrID string, before domain.AutomationRunID, limit int) (View, []domain.AutomationRun, error) {
	v, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return View{}, nil, err
	}
	runs, err := r.st.ListRuns(ctx, v.Automation.ID, before, limit)
	return v, runs, err
}

// RunDetail is a run with its step record.
type RunDetail struct {
	Run   domain.AutomationRun
	Name  string // the automation's
	Steps []domain.RunStep
}

// RunDetail reads org's run and its steps.
func (r *Runner) RunDetail(ctx context.Context, org domain.OrgID, id domain.AutomationRunID) (RunDetail, error) {
	run, err := r.orgRun(ctx, org, id)
	if err != nil {
		return RunDetail{}, err
	}
	a, err := r.st.GetAutomation(ctx, run.AutomationID)
	if err != nil {
		return RunDetail{}, err
	}
	steps, err := r.st.ListSteps(ctx, id)
	return RunDetail{Run: run, Name: a.Name, Steps: steps}, err
}

// values are a run's template values: inputs.NAME, trigger.PATH (every
// dotted path into the payload; objects and arrays as JSON) and, from
// outputs, steps.ID.output.
func values(inputs map[string]any, payload json.RawMessage, outputs map[string]string) map[string]string {
	vals := map[string]string{}
	for k, v := range inputs {
		vals["inputs."+k] = scalar(v)
	}
	var root any
	if json.Unmarshal(payload, &root) == nil {
		flatten(vals, "trigger", root, 0)
	}
	for id, out := range outputs {
		vals["steps."+id+".output"] = out
	}
	return vals
}

// maxFlatten bounds how many values one payload gives, and how deep.
const (
	maxFlatten      = 4096
	maxFlattenDepth = 16
)

func flatten(vals map[string]string, prefix string, v any, depth int) {
	if len(vals) >= maxFlatten {
		return
	}
	vals[prefix] = scalar(v)
	if depth >= maxFlattenDepth {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			flatten(vals, prefix+"."+k, c, depth+1)
		}
	case []any:
		for i, c := range t {
			flatten(vals, prefix+"."+strconv.Itoa(i), c, depth+1)
		}
	}
}

// scalar renders a value into a template: strings as they are, the rest
// as JSON.
func scalar(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
