package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// Version returns the server's version and protocol versions.
func (c *Client) Version(ctx context.Context) (apiv1.Version, error) {
	var v apiv1.Version
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteVersion, ""), nil, nil, &v)
	return v, err
}

// OpenAPI returns the server's OpenAPI document (YAML).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	resp, err := c.send(ctx, http.MethodGet, routePath(apiv1.RouteOpenAPI, ""), nil, nil, "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read OpenAPI document: %w", err)
	}
	return b, nil
}

// ListHosts lists hosts.
func (c *Client) ListHosts(ctx context.Context) ([]apiv1.Host, error) {
	var l apiv1.HostList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListHosts, ""), nil, nil, &l)
	return l.Hosts, err
}

// GetHost returns one host.
func (c *Client) GetHost(ctx context.Context, id string) (apiv1.Host, error) {
	var h apiv1.Host
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetHost, id), nil, nil, &h)
	return h, err
}

// DrainHost stops placing sessions on a host and returns it.
func (c *Client) DrainHost(ctx context.Context, id string) (apiv1.Host, error) {
	var h apiv1.Host
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteDrainHost, id), nil, nil, &h)
	return h, err
}

// CreateHost registers a host name; the answer's Token is shown only once.
func (c *Client) CreateHost(ctx context.Context, name string) (apiv1.CreateHostResponse, error) {
	var r apiv1.CreateHostResponse
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateHost, ""), nil, apiv1.CreateHostRequest{Name: name}, &r)
	return r, err
}

// CreateToken mints a user API token; the answer's Secret is shown only once.
func (c *Client) CreateToken(ctx context.Context, name string) (apiv1.CreateTokenResponse, error) {
	var r apiv1.CreateTokenResponse
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateToken, ""), nil, apiv1.CreateTokenRequest{Name: name}, &r)
	return r, err
}

// ListTokens lists tokens (without secrets).
func (c *Client) ListTokens(ctx context.Context) ([]apiv1.Token, error) {
	var l apiv1.TokenList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListTokens, ""), nil, nil, &l)
	return l.Tokens, err
}

// RevokeToken revokes a token.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, routePath(apiv1.RouteRevokeToken, id), nil, nil, nil)
}
