package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
)

// AutomationClient calls the automation and run routes.
// Client.Automations returns one.
type AutomationClient struct{ c *Client }

// Automations returns the client of the automation routes.
func (c *Client) Automations() AutomationClient { return AutomationClient{c} }

// Create validates and saves a definition at version 1; a webhook
// trigger's secret is in the answer, this once.
func (ac AutomationClient) Create(ctx context.Context, req apiv1.CreateAutomationRequest) (apiv1.AutomationResponse, error) {
	var r apiv1.AutomationResponse
	err := ac.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateAutomation, ""), nil, req, &r)
	return r, err
}

// List lists every automation by name.
func (ac AutomationClient) List(ctx context.Context) ([]apiv1.Automation, error) {
	return listAll(ctx, ac.c, routePath(apiv1.RouteListAutomations, ""), nil,
		func(l apiv1.AutomationList) ([]apiv1.Automation, string) { return l.Items, l.NextCursor })
}

// Get returns an automation (by name or id) at its current version.
func (ac AutomationClient) Get(ctx context.Context, name string) (apiv1.Automation, error) {
	var a apiv1.Automation
	err := ac.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetAutomation, name), nil, nil, &a)
	return a, err
}

// Update saves a new version; runs already started finish on theirs.
func (ac AutomationClient) Update(ctx context.Context, name string, req apiv1.UpdateAutomationRequest) (apiv1.AutomationResponse, error) {
	var r apiv1.AutomationResponse
	err := ac.c.call(ctx, http.MethodPut, routePath(apiv1.RouteUpdateAutomation, name), nil, req, &r)
	return r, err
}

// Delete deletes an automation with its runs.
func (ac AutomationClient) Delete(ctx context.Context, name string) (apiv1.Automation, error) {
	var a apiv1.Automation
	err := ac.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteAutomation, name), nil, nil, &a)
	return a, err
}

// SetEnabled turns an automation's trigger on or off.
func (ac AutomationClient) SetEnabled(ctx context.Context, name string, on bool) (apiv1.Automation, error) {
	route := apiv1.RouteDisableAutomation
	if on {
		route = apiv1.RouteEnableAutomation
	}
	var a apiv1.Automation
	err := ac.c.call(ctx, http.MethodPost, routePath(route, name), nil, nil, &a)
	return a, err
}

// RotateHookSecret gives a webhook automation a new secret.
func (ac AutomationClient) RotateHookSecret(ctx context.Context, name string) (apiv1.AutomationResponse, error) {
	var r apiv1.AutomationResponse
	err := ac.c.call(ctx, http.MethodPost, routePath(apiv1.RouteRotateHookSecret, name), nil, nil, &r)
	return r, err
}

// Run starts a run by hand.
func (ac AutomationClient) Run(ctx context.Context, name string, req apiv1.StartRunRequest) (apiv1.RunResponse, error) {
	var r apiv1.RunResponse
	err := ac.c.call(ctx, http.MethodPost, routePath(apiv1.RouteStartRun, name), nil, req, &r)
	return r, err
}

// Runs lists an automation's runs, newest first, at most limit (0: all),
// and the cursor of the runs after them ("" when there are none).
func (ac AutomationClient) Runs(ctx context.Context, name string, limit int) ([]apiv1.Run, string, error) {
	path := routePath(apiv1.RouteListRuns, name)
	if limit <= 0 {
		runs, err := listAll(ctx, ac.c, path, nil, func(l apiv1.RunList) ([]apiv1.Run, string) { return l.Items, l.NextCursor })
		return runs, "", err
	}
	var l apiv1.RunList
	err := ac.c.call(ctx, http.MethodGet, path, url.Values{"limit": {strconv.Itoa(min(limit, apiv1.MaxPageLimit))}}, nil, &l)
	return l.Items, l.NextCursor, err
}

// GetRun returns a run with its step record.
func (ac AutomationClient) GetRun(ctx context.Context, id string) (apiv1.RunDetail, error) {
	var d apiv1.RunDetail
	err := ac.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetRun, id), nil, nil, &d)
	return d, err
}

// CancelRun cancels a run that has not ended.
func (ac AutomationClient) CancelRun(ctx context.Context, id string) (apiv1.Run, error) {
	var r apiv1.Run
	err := ac.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCancelRun, id), nil, nil, &r)
	return r, err
}
