package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/engrams/engrams/api/apiv1"
)

// HarnessClient calls the harness routes. Client.Harnesses returns one.
type HarnessClient struct{ c *Client }

// Harnesses returns the client of the harness routes.
func (c *Client) Harnesses() HarnessClient { return HarnessClient{c} }

// Build builds a built-in harness (claude-code, codex, shell) on the
// server and registers it. The call may take minutes (a first build
// downloads npm packages); bound it with ctx. An exact version already
// registered answers at once.
func (hr HarnessClient) Build(ctx context.Context, req apiv1.BuildHarnessRequest) (apiv1.Harness, error) {
	var h apiv1.Harness
	err := hr.c.call(ctx, http.MethodPost, routePath(apiv1.RouteBuildHarness, ""), nil, req, &h)
	return h, err
}

// Add uploads a tar (or gzip-compressed tar) of a directory holding
// harness.json at its root and registers it as a custom harness.
func (hr HarnessClient) Add(ctx context.Context, tarball io.Reader) (apiv1.Harness, error) {
	path := routePath(apiv1.RouteAddHarness, "")
	resp, err := hr.c.send(ctx, http.MethodPost, path, nil, tarball, "application/gzip", http.Header{"Accept": {"application/json"}})
	if err != nil {
		return apiv1.Harness{}, err
	}
	defer resp.Body.Close()
	var h apiv1.Harness
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, fmt.Errorf("decode POST %s answer: %w", path, err)
	}
	return h, nil
}

// List lists registered harnesses by name, then oldest first.
func (hr HarnessClient) List(ctx context.Context) ([]apiv1.Harness, error) {
	return listAll(ctx, hr.c, routePath(apiv1.RouteListHarnesses, ""), nil, func(l apiv1.HarnessList) ([]apiv1.Harness, string) { return l.Items, l.NextCursor })
}

// Get returns harness name at version ("": the newest).
func (hr HarnessClient) Get(ctx context.Context, name, version string) (apiv1.Harness, error) {
	var q url.Values
	if version != "" {
		q = url.Values{"version": {version}}
	}
	var h apiv1.Harness
	err := hr.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetHarness, name), q, nil, &h)
	return h, err
}

// Delete deletes harness name at version ("": the newest); sessions made
// with it keep it.
func (hr HarnessClient) Delete(ctx context.Context, name, version string) (apiv1.Harness, error) {
	var q url.Values
	if version != "" {
		q = url.Values{"version": {version}}
	}
	var h apiv1.Harness
	err := hr.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteHarness, name), q, nil, &h)
	return h, err
}
