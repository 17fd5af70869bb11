package autorun

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/domain"
)

// View is an automation with its current definition.
type View struct {
	Automation domain.Automation
	Definition automations.Definition
}

// Saved is what saving an automation answers: the view and, when a
// webhook secret was made, the secret, shown this once.
type Saved struct {
	View
	HookSecret string
}

// invalid is the error of a definition with problems, each with its place.
func invalid(name string, probs []automations.Problem) error {
	lines := make([]string, len(probs))
	for i, p := range probs {
		lines[i] = p.String()
	}
	if len(lines) == 1 {
		return fmt.Errorf("%w: automation %s: %s", domain.ErrInvalid, name, lines[0])
	}
	return fmt.Errorf("%w: automation %s has %d problems:\n  - %s", domain.ErrInvalid, name, len(lines), strings.Join(lines, "\n  - "))
}

// decode reads and validates a definition as sent.
func (r *Runner) decode(raw []byte) (automations.Definition, []byte, error) {
	def, err := automations.DecodeDefinition(raw)
	if err != nil {
		return def, nil, fmt.Errorf("%w: %w", domain.ErrInvalid, err)
	}
	if probs := automations.Validate(def, r.cfg.Limits); len(probs) > 0 {
		return def, nil, invalid(def.Name, probs)
	}
	canon, err := json.Marshal(def)
	if err != nil {
		return def, nil, fmt.Errorf("encode automation %s: %w", def.Name, err)
	}
	return def, canon, nil
}

// newHookSecret makes a webhook secret and its sealed form for automation id.
func (r *Runner) newHookSecret(id domain.AutomationID) (string, []byte, error) {
	if r.seal == nil {
		return "", nil, fmt.Errorf("%w: this server keeps no secrets, so it cannot keep a webhook's (start it with --secrets-key-file)", domain.ErrInvalid)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	plain := "whsec_" + base64.RawURLEncoding.EncodeToString(b)
	sealed, err := r.seal.Seal([]byte(plain), domain.SealedHookSecret.AssociatedData(string(id)))
	if err != nil {
		return "", nil, fmt.Errorf("seal the hook secret: %w", err)
	}
	return plain, sealed, nil
}

// CreateAutomation validates a definition (JSON or YAML) and saves it at
// version 1 as org's, disabled unless enabled. A webhook trigger gets its
// secret.
func (r *Runner) CreateAutomation(ctx context.Context, org domain.OrgID, raw []byte, enabled bool) (Saved, error) {
	def, canon, err := r.decode(raw)
	if err != nil {
		return Saved{}, err
	}
	a := domain.Automation{ID: domain.AutomationID(r.newID()), Org: org, Name: def.Name, Enabled: enabled, TriggerKind: string(def.Trigger.Kind),
		HookSlug: def.Trigger.Slug, CreatedAt: r.now()}
	var secret string
	if def.Trigger.Kind == automations.TriggerWebhook {
		if secret, a.HookSecret, err = r.newHookSecret(a.ID); err != nil {
			return Saved{}, err
		}
	}
	a, err = r.st.CreateAutomation(ctx, a, canon)
	if err != nil {
		return Saved{}, err
	}
	r.log.Info("automation created", "automation_id", a.ID, "name", a.Name, "trigger", a.TriggerKind)
	return Saved{View: View{Automation: a, Definition: def}, HookSecret: secret}, nil
}

// UpdateAutomation saves a new version of an automation at version
// expect (0: whatever it is at); runs started before finish on theirs.
func (r *Runner) UpdateAutomation(ctx context.Context, org domain.OrgID, nameOrID string, raw []byte, expect int64) (Saved, error) {
	cur, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return Saved{}, err
	}
	def, canon, err := r.decode(raw)
	if err != nil {
		return Saved{}, err
	}
	if expect == 0 {
		expect = cur.Automation.Version
	}
	a := cur.Automation
	a.Name, a.TriggerKind, a.HookSlug, a.HookSecret, a.UpdatedAt = def.Name, string(def.Trigger.Kind), def.Trigger.Slug, nil, r.now()
	var secret string
	if def.Trigger.Kind == automations.TriggerWebhook && len(cur.Automation.HookSecret) == 0 {
		if secret, a.HookSecret, err = r.newHookSecret(a.ID); err != nil {
			return Saved{}, err
		}
	}
	a, err = r.st.UpdateAutomation(ctx, a, canon, expect)
	if err != nil {
		return Saved{}, err
	}
	return Saved{View: View{Automation: a, Definition: def}, HookSecret: secret}, nil
}

// RotateHookSecret gives a webhook automation a new secret, shown once;
// the old one stops working.
func (r *Runner) RotateHookSecret(ctx context.Context, org domain.OrgID, nameOrID string) (Saved, error) {
	cur, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return Saved{}, err
	}
	if cur.Definition.Trigger.Kind != automations.TriggerWebhook {
		return Saved{}, fmt.Errorf("%w: automation %s has a %s trigger, not a webhook", domain.ErrInvalid, cur.Automation.Name, cur.Definition.Trigger.Kind)
	}
	canon, err := json.Marshal(cur.Definition)
	if err != nil {
		return Saved{}, fmt.Errorf("encode automation %s: %w", cur.Automation.Name, err)
	}
	a := cur.Automation
	secret, sealed, err := r.newHookSecret(a.ID)
	if err != nil {
		return Saved{}, err
	}
	a.HookSecret, a.UpdatedAt = sealed, r.now()
	if a, err = r.st.UpdateAutomation(ctx, a, canon, cur.Automation.Version); err != nil {
		return Saved{}, err
	}
	return Saved{View: View{Automation: a, Definition: cur.Definition}, HookSecret: secret}, nil
}

// SetEnabled turns an automation's trigger on or off; a disabled one
// still runs by hand.
func (r *Runner) SetEnabled(ctx context.Context, org domain.OrgID, nameOrID string, enabled bool) (View, error) {
	cur, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return View{}, err
	}
	a, err := r.st.SetAutomationEnabled(ctx, cur.Automation.ID, enabled, r.now())
	if err != nil {
		return View{}, err
	}
	return View{Automation: a, Definition: cur.Definition}, nil
}

// DeleteAutomation deletes an automation with its versions and runs;
// runs still going are cancelled first.
func (r *Runner) DeleteAutomation(ctx context.Context, org domain.OrgID, nameOrID string) (View, error) {
	cur, err := r.Automation(ctx, org, nameOrID)
	if err != nil {
		return View{}, err
	}
	for before := domain.AutomationRunID(""); ; {
		runs, err := r.st.ListRuns(ctx, cur.Automation.ID, before, 500)
		if err != nil {
			return View{}, err
		}
		for _, run := range runs {
			if !run.State.Terminal() {
				if err := r.endRun(ctx, run, domain.RunCancelled, "its automation was deleted"); err != nil {
					return View{}, err
				}
			}
		}
		if len(runs) < 500 {
			break
		}
		before = runs[len(runs)-1].ID
	}
	return cur, r.st.DeleteAutomation(ctx, cur.Automation.ID)
}

// Automation finds org's automation by name or id, with its definition;
// another organisation's is not found, as one that does not exist.
func (r *Runner) Automation(ctx context.Context, org domain.OrgID, nameOrID string) (View, error) {
	a, err := r.st.GetAutomationByName(ctx, org, nameOrID)
	if errors.Is(err, domain.ErrNotFound) {
		a, err = r.st.GetAutomation(ctx, domain.AutomationID(nameOrID))
	}
	if err == nil && (org == "" || a.Org != org) {
		err = domain.ErrNotFound
	}
	if errors.Is(err, domain.ErrNotFound) {
		return View{}, fmt.Errorf("%w: no automation %q", domain.ErrNotFound, nameOrID)
	}
	if err != nil {
		return View{}, err
	}
	return r.view(ctx, a)
}

func (r *Runner) view(ctx context.Context, a domain.Automation) (View, error) {
	def, err := r.definition(ctx, a.ID, a.Version)
	if err != nil {
		return View{}, err
	}
	return View{Automation: a, Definition: def}, nil
}

// definition reads one saved version.
func (r *Runner) definition(ctx context.Context, id domain.AutomationID, version int64) (automations.Definition, error) {
	v, err := r.st.GetAutomationVersion(ctx, id, version)
	if err != nil {
		return automations.Definition{}, err
	}
	var def automations.Definition
	if err := json.Unmarshal(v.Definition, &def); err != nil {
		return def, fmt.Errorf("decode automation %s version %d: %w", id, version, err)
	}
	return def, nil
}

// Automations lists org's automations by name.
func (r *Runner) Automations(ctx context.Context, org domain.OrgID) ([]View, error) {
	if org == "" {
		return nil, nil
	}
	as, err := r.st.ListAutomations(ctx, org, "")
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(as))
	for _, a := range as {
		v, err := r.view(ctx, a)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
