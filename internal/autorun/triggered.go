package autorun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// StartTriggered starts the runs of one delivery's event (the delivery
// pipeline, intake): a run of each enabled automation whose trigger is
// of kind s.Trigger (only s.Automation, when set) and that s.Admit
// matches. One that Admit refuses is recorded as a refused run saying
// why; one over its automation's caps as a skipped run. Every run is
// keyed by key, so the same delivery again finds them and starts nothing.
func (r *Runner) StartTriggered(ctx context.Context, s connector.Start, payload json.RawMessage, key string) ([]connector.Started, error) {
	views, err := r.triggered(ctx, s)
	if err != nil {
		return nil, err
	}
	admit := s.Admit
	if admit == nil {
		admit = connector.Admit
	}
	var out []connector.Started
	var errs []error
	for _, v := range views {
		adm := admit(triggerOf(v.Definition.Trigger))
		if !adm.Match {
			continue
		}
		req := RunRequest{Kind: automations.TriggerKind(s.Trigger), Inputs: s.Inputs, Trigger: payload, DedupKey: key, Actor: s.Actor, refused: adm.Refused}
		st, err := r.start(ctx, v, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("automation %s: %w", v.Automation.Name, err))
			continue
		}
		out = append(out, connector.Started{Run: st.Run, Created: st.Created})
	}
	return out, errors.Join(errs...)
}

// triggered are the views a Start may start: the one automation it names
// (enabled, with its trigger), or every enabled one with its trigger of
// the organisation holding the integration that delivers it (none when
// no one does: the default is no).
func (r *Runner) triggered(ctx context.Context, s connector.Start) ([]View, error) {
	if s.Automation != "" {
		a, err := r.st.GetAutomation(ctx, s.Automation)
		if err != nil {
			return nil, err
		}
		if !a.Enabled {
			return nil, fmt.Errorf("%w: automation %s is disabled", domain.ErrNotActive, a.Name)
		}
		if a.TriggerKind != s.Trigger {
			return nil, nil
		}
		v, err := r.view(ctx, a)
		return []View{v}, err
	}
	kind := automations.TriggerKind(s.Trigger).Integration()
	if kind == "" {
		return nil, fmt.Errorf("%w: a %s trigger names its automation", domain.ErrInvalid, s.Trigger)
	}
	in, err := r.st.GetIntegration(ctx, kind)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && in.Org == "") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	as, err := r.st.ListAutomations(ctx, in.Org, s.Trigger)
	if err != nil {
		return nil, err
	}
	var out []View
	var errs []error
	for _, a := range as {
		v, err := r.view(ctx, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, v)
	}
	return out, errors.Join(errs...)
}

// triggerOf is what a connector's Admit sees of a trigger.
func triggerOf(t automations.Trigger) connector.Trigger {
	return connector.Trigger{Channels: t.Channels, Repos: t.Repos, Events: t.Events, Labels: t.Labels, MinAuthor: t.MinAuthor}
}

// RecordRefusal records an attempt to steer a run that its sender may not
// make (a reply in a task's Slack thread from someone else) as a refused
// run of that run's automation, keyed by key.
func (r *Runner) RecordRefusal(ctx context.Context, ref connector.Refusal, payload json.RawMessage, key string) (connector.Started, error) {
	run, err := r.st.GetRun(ctx, ref.Run)
	if err != nil {
		return connector.Started{}, fmt.Errorf("the run a refusal names: %w", err)
	}
	a, err := r.st.GetAutomation(ctx, run.AutomationID)
	if err != nil {
		return connector.Started{}, err
	}
	v, err := r.view(ctx, a)
	if err != nil {
		return connector.Started{}, err
	}
	st, err := r.start(ctx, v, RunRequest{Kind: automations.TriggerKind(run.TriggerKind), Trigger: payload, DedupKey: key, refused: ref.Reason})
	return connector.Started{Run: st.Run, Created: st.Created}, err
}

// RunOfDelivery is the run an automation's delivery with key started.
func (r *Runner) RunOfDelivery(ctx context.Context, id domain.AutomationID, key string) (domain.AutomationRun, error) {
	return r.st.GetRunByDedupKey(ctx, id, key)
}
