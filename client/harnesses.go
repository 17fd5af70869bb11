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

// BuildHarness builds a built-in harness (claude-code, codex, shell) on the
// server and registers it. The call may take minutes (a first build
// downloads npm packages); bound it with ctx. An exact version already
// registered answers at once.
func (c *Client) BuildHarness(ctx context.Context, req apiv1.BuildHarnessRequest) (apiv1.Harness, error) {
	var h apiv1.Harness
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteBuildHarness, ""), nil, req, &h)
	return h, err
}

// AddHarness uploads a tar (or gzip-compressed tar) of a directory holding
// harness.json at its root and registers it as a custom harness.
func (c *Client) AddHarness(ctx context.Context, tarball io.Reader) (apiv1.Harness, error) {
	path := routePath(apiv1.RouteAddHarness, "")
	resp, err := c.send(ctx, http.MethodPost, path, nil, tarball, "application/gzip", http.Header{"Accept": {"application/json"}})
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

// ListHarnesses lists registered harnesses by name, then oldest first.
func (c *Client) ListHarnesses(ctx context.Context) ([]apiv1.Harness, error) {
	var l apiv1.HarnessList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListHarnesses, ""), nil, nil, &l)
	return l.Harnesses, err
}

// GetHarness returns harness name at version ("": the newest).
func (c *Client) GetHarness(ctx context.Context, name, version string) (apiv1.Harness, error) {
	var q url.Values
	if version != "" {
		q = url.Values{"version": {version}}
	}
	var h apiv1.Harness
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetHarness, name), q, nil, &h)
	return h, err
}
