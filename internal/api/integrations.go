package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubapp"
	"github.com/engrams/engrams/internal/integrations"
)

// IntegrationService configures integrations (integrations.Service).
type IntegrationService interface {
	Add(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, config json.RawMessage, secrets map[string]string) (integrations.View, error)
	List(ctx context.Context, org domain.OrgID) ([]integrations.View, error)
	Remove(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind) error
	Holder(ctx context.Context, kind domain.IntegrationKind) (domain.OrgID, error)
}

// Builtins installs an integration's built-in automations (autorun.Runner).
type Builtins interface {
	InstallBuiltins(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, config json.RawMessage) ([]string, error)
}

// TaskPRs opens pull requests from tasks (githubapp.App).
type TaskPRs interface {
	OpenTaskPR(ctx context.Context, taskID domain.TaskID, repo, title, path string) (githubapp.PullRequest, error)
}

// integrationsRouter serves integrations and the deliveries of Slack.
type integrationsRouter struct {
	*base
	co       IntegrationService
	builtins Builtins
	prs      TaskPRs
}

func (s *integrationsRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteAddIntegration, s.add)
	h(apiv1.RouteListIntegrations, s.list)
	h(apiv1.RouteRemoveIntegration, s.remove)
	h(apiv1.RouteTaskPR, s.taskPR)
}

func (s *integrationsRouter) ready(w http.ResponseWriter) bool {
	if s.co == nil {
		writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this server runs no integrations")
		return false
	}
	return true
}

func (s *integrationsRouter) add(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	var req apiv1.AddIntegrationRequest
	if !s.decode(w, r, &req) {
		return
	}
	org := principalFrom(r.Context()).OrgID
	v, err := s.co.Add(r.Context(), org, domain.IntegrationKind(req.Kind), req.Config, req.Secrets)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := integrationOut(v)
	if s.builtins != nil {
		if out.Builtins, err = s.builtins.InstallBuiltins(r.Context(), org, v.Kind, v.Config); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	noteTarget(r, string(v.Kind))
	writeJSON(w, http.StatusCreated, out)
}

func (s *integrationsRouter) list(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	vs, err := s.co.List(r.Context(), principalFrom(r.Context()).OrgID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.IntegrationList{Items: make([]apiv1.Integration, 0, len(vs))}
	for _, v := range vs {
		out.Items = append(out.Items, integrationOut(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *integrationsRouter) remove(w http.ResponseWriter, r *http.Request) {
	if !s.ready(w) {
		return
	}
	if err := s.co.Remove(r.Context(), principalFrom(r.Context()).OrgID, domain.IntegrationKind(r.PathValue("kind"))); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": r.PathValue("kind")})
}

func (s *integrationsRouter) taskPR(w http.ResponseWriter, r *http.Request) {
	if s.prs == nil {
		writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this server runs no GitHub integration")
		return
	}
	var req apiv1.TaskPRRequest
	if !s.decode(w, r, &req) {
		return
	}
	// The GitHub App's credential acts for the organisation holding it:
	// a task of another organisation opens no pull request with it.
	if ok, err := s.holds(r, domain.IntegrationGitHub); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: your organisation has no GitHub integration (engrams integration add github)", domain.ErrInvalid)
		}
		s.fail(w, r, err)
		return
	}
	pr, err := s.prs.OpenTaskPR(r.Context(), pathTask(r), req.Repo, req.Title, req.Path)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.TaskPR{URL: pr.URL, Number: pr.Number, Branch: pr.Branch, Commit: pr.Commit})
}

// holds says the caller's organisation holds the integration of kind.
func (s *integrationsRouter) holds(r *http.Request, kind domain.IntegrationKind) (bool, error) {
	if s.co == nil {
		return false, nil
	}
	org, err := s.co.Holder(r.Context(), kind)
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	return err == nil && org == principalFrom(r.Context()).OrgID, err
}

func integrationOut(v integrations.View) apiv1.Integration {
	return apiv1.Integration{Kind: string(v.Kind), Config: v.Config, Secrets: v.Secrets, UpdatedAt: v.UpdatedAt}
}
