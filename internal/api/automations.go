package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/domain"
)

// AutomationService keeps automations (autorun.Runner).
type AutomationService interface {
	CreateAutomation(ctx context.Context, org domain.OrgID, raw []byte, enabled bool) (autorun.Saved, error)
	UpdateAutomation(ctx context.Context, org domain.OrgID, nameOrID string, raw []byte, expect int64) (autorun.Saved, error)
	RotateHookSecret(ctx context.Context, org domain.OrgID, nameOrID string) (autorun.Saved, error)
	SetEnabled(ctx context.Context, org domain.OrgID, nameOrID string, enabled bool) (autorun.View, error)
	DeleteAutomation(ctx context.Context, org domain.OrgID, nameOrID string) (autorun.View, error)
	Automation(ctx context.Context, org domain.OrgID, nameOrID string) (autorun.View, error)
	Automations(ctx context.Context, org domain.OrgID) ([]autorun.View, error)
	Builtins() []autorun.Builtin
}

// AutomationRuns starts, lists and cancels runs (autorun.Runner).
type AutomationRuns interface {
	StartRun(ctx context.Context, org domain.OrgID, nameOrID string, req autorun.RunRequest) (autorun.Started, error)
	Runs(ctx context.Context, org domain.OrgID, nameOrID string, before domain.AutomationRunID, limit int) (autorun.View, []domain.AutomationRun, error)
	RunDetail(ctx context.Context, org domain.OrgID, id domain.AutomationRunID) (autorun.RunDetail, error)
	CancelRun(ctx context.Context, org domain.OrgID, id domain.AutomationRunID) (domain.AutomationRun, error)
}

// automationsRouter serves automations, their runs and webhook
// deliveries.
type automationsRouter struct {
	*base
	co   AutomationService
	runs AutomationRuns
}

func (s *automationsRouter) route(h func(string, http.HandlerFunc)) {
	for pattern, fn := range map[string]http.HandlerFunc{
		apiv1.RouteCreateAutomation:  s.create,
		apiv1.RouteListAutomations:   s.list,
		apiv1.RouteGetAutomation:     s.get,
		apiv1.RouteUpdateAutomation:  s.update,
		apiv1.RouteDeleteAutomation:  s.delete,
		apiv1.RouteEnableAutomation:  s.enabled(true),
		apiv1.RouteDisableAutomation: s.enabled(false),
		apiv1.RouteRotateHookSecret:  s.rotate,
		apiv1.RouteStartRun:          s.startRun,
		apiv1.RouteListRuns:          s.listRuns,
		apiv1.RouteGetRun:            s.getRun,
		apiv1.RouteCancelRun:         s.cancelRun,
		apiv1.RouteListBuiltins:      s.builtins,
	} {
		h(pattern, s.configured(fn))
	}
}

// configured answers 503 when the server runs no automations.
func (s *automationsRouter) configured(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.co == nil || s.runs == nil {
			writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this server runs no automations")
			return
		}
		fn(w, r)
	}
}

func (s *automationsRouter) create(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateAutomationRequest
	if !s.decode(w, r, &req) {
		return
	}
	saved, err := s.co.CreateAutomation(r.Context(), orgOf(r), []byte(req.Definition), req.Enabled)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, saved.Automation.Name)
	writeSaved(w, http.StatusCreated, saved)
}

func (s *automationsRouter) update(w http.ResponseWriter, r *http.Request) {
	var req apiv1.UpdateAutomationRequest
	if !s.decode(w, r, &req) {
		return
	}
	saved, err := s.co.UpdateAutomation(r.Context(), orgOf(r), r.PathValue("name"), []byte(req.Definition), req.Version)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeSaved(w, http.StatusOK, saved)
}

func (s *automationsRouter) rotate(w http.ResponseWriter, r *http.Request) {
	saved, err := s.co.RotateHookSecret(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeSaved(w, http.StatusOK, saved)
}

func (s *automationsRouter) list(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	vs, err := s.co.Automations(r.Context(), orgOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Automation, 0, len(vs))
	for _, v := range vs {
		all = append(all, automationOut(v))
	}
	var out apiv1.AutomationList
	out.Items, out.NextCursor = pageOf(all, func(a apiv1.Automation) string { return a.Name }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *automationsRouter) get(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Automation(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, automationOut(v))
}

func (s *automationsRouter) delete(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DeleteAutomation(r.Context(), orgOf(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, automationOut(v))
}

func (s *automationsRouter) enabled(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := s.co.SetEnabled(r.Context(), orgOf(r), r.PathValue("name"), on)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, automationOut(v))
	}
}

func (s *automationsRouter) startRun(w http.ResponseWriter, r *http.Request) {
	var req apiv1.StartRunRequest
	if !s.decode(w, r, &req) {
		return
	}
	// A trigger payload by hand is a curator's test of what an integration
	// would send (it may name a profile): a member gives inputs only.
	p := principalFrom(r.Context())
	if givesTrigger(req.Trigger) && !p.Role.AtLeast(domain.RoleAdmin) {
		writeError(w, http.StatusForbidden, apiv1.CodeForbidden, "only owners and admins start a run with a trigger payload; give inputs")
		return
	}
	// A retry with the same Idempotency-Key is answered by the middleware.
	started, err := s.runs.StartRun(r.Context(), orgOf(r), r.PathValue("name"), autorun.RunRequest{Inputs: req.Inputs, Trigger: req.Trigger,
		Actor: p.UserID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeStarted(w, r, started, http.StatusCreated)
}

// writeStarted answers a start: status for a new run, 200 for a delivery
// seen before.
func (s *automationsRouter) writeStarted(w http.ResponseWriter, r *http.Request, st autorun.Started, status int) {
	d, err := s.runs.RunDetail(r.Context(), orgOf(r), st.Run.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !st.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, apiv1.RunResponse{Run: runOut(d.Run, d.Name), Duplicate: !st.Created})
}

func (s *automationsRouter) listRuns(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	v, runs, err := s.runs.Runs(r.Context(), orgOf(r), r.PathValue("name"), domain.AutomationRunID(p.after), p.limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.RunList{Items: []apiv1.Run{}}
	for i, run := range runs {
		if i == p.limit {
			out.NextCursor = cursorOf(string(runs[i-1].ID))
			break
		}
		out.Items = append(out.Items, redacted(principalFrom(r.Context()), run, runOut(run, v.Automation.Name)))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *automationsRouter) getRun(w http.ResponseWriter, r *http.Request) {
	d, err := s.runs.RunDetail(r.Context(), orgOf(r), domain.AutomationRunID(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	out := apiv1.RunDetail{Run: redacted(p, d.Run, runOut(d.Run, d.Name)), Steps: make([]apiv1.RunStep, 0, len(d.Steps))}
	for _, st := range d.Steps {
		so := stepOut(st)
		if !seesRunContent(p, d.Run) {
			so.Input, so.Output = nil, ""
		}
		out.Steps = append(out.Steps, so)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *automationsRouter) cancelRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.runs.CancelRun(r.Context(), orgOf(r), domain.AutomationRunID(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.runs.RunDetail(r.Context(), orgOf(r), run.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, redacted(principalFrom(r.Context()), d.Run, runOut(d.Run, d.Name)))
}

// seesRunContent says p reads what a run carries (its trigger payload,
// inputs, and its steps' input and output, which quote its tasks): owners
// and admins; the person who caused it; and every member for a run no
// person caused (a schedule's, a webhook's: its tasks are shared). Others
// see that it ran, and how.
func seesRunContent(p access.Principal, run domain.AutomationRun) bool {
	return p.Role.AtLeast(domain.RoleAdmin) || run.ActorID == "" || (!p.Service && run.ActorID == p.UserID)
}

// redacted is out without what p may not read of run.
func redacted(p access.Principal, run domain.AutomationRun, out apiv1.Run) apiv1.Run {
	if !seesRunContent(p, run) {
		out.Payload, out.Inputs = nil, nil
	}
	return out
}

func (s *automationsRouter) builtins(w http.ResponseWriter, _ *http.Request) {
	out := apiv1.BuiltinList{Items: []apiv1.Builtin{}}
	for _, b := range s.co.Builtins() {
		out.Items = append(out.Items, apiv1.Builtin{Name: b.Name, Integration: string(b.Integration), Definition: b.Definition})
	}
	writeJSON(w, http.StatusOK, out)
}

func automationOut(v autorun.View) apiv1.Automation {
	a := v.Automation
	def, _ := json.Marshal(v.Definition)
	out := apiv1.Automation{ID: string(a.ID), Name: a.Name, Enabled: a.Enabled, Version: a.Version, Trigger: a.TriggerKind,
		Definition: def, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	if a.HookSlug != "" {
		out.HookURL = "/v1/hooks/" + a.HookSlug
	}
	return out
}

// writeSaved answers a save; one that made a hook secret shows it this
// once and is never kept for a replay.
func writeSaved(w http.ResponseWriter, status int, s autorun.Saved) {
	if s.HookSecret != "" {
		writeSecret(w, status, savedOut(s))
		return
	}
	writeJSON(w, status, savedOut(s))
}

func savedOut(s autorun.Saved) apiv1.AutomationResponse {
	return apiv1.AutomationResponse{Automation: automationOut(s.View), HookSecret: s.HookSecret}
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func runOut(r domain.AutomationRun, name string) apiv1.Run {
	return apiv1.Run{ID: string(r.ID), AutomationID: string(r.AutomationID), Automation: name, Version: r.Version, State: string(r.State),
		Trigger: r.TriggerKind, ConcurrencyKey: r.ConcurrencyKey, Payload: r.Trigger, Inputs: r.Inputs, Error: r.Error,
		ActorID: string(r.ActorID), CreatedAt: r.CreatedAt, StartedAt: optTime(r.StartedAt), EndedAt: optTime(r.EndedAt)}
}

func stepOut(s domain.RunStep) apiv1.RunStep {
	out := apiv1.RunStep{Seq: s.Seq, Block: s.BlockID, Kind: s.Kind, Path: s.Path, State: string(s.State), Attempt: s.Attempt,
		Input: s.Input, Output: s.Output, Error: s.Error, StartedAt: s.StartedAt, EndedAt: optTime(s.EndedAt)}
	if !s.EndedAt.IsZero() {
		out.DurationMS = s.EndedAt.Sub(s.StartedAt).Milliseconds()
	}
	return out
}

// orgOf is the organisation r's caller acts in.
func orgOf(r *http.Request) domain.OrgID { return principalFrom(r.Context()).OrgID }

// givesTrigger says a run's request carries a trigger payload: anything
// but nothing, null or an empty object.
func givesTrigger(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if len(raw) == 0 || string(raw) == "null" {
		return false
	}
	return json.Unmarshal(raw, &m) != nil || len(m) > 0
}
