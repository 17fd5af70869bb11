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

// HostClient calls the host routes. Client.Hosts returns one.
type HostClient struct{ c *Client }

// Hosts returns the client of the host routes.
func (c *Client) Hosts() HostClient { return HostClient{c} }

// List lists hosts.
func (hc HostClient) List(ctx context.Context) ([]apiv1.Host, error) {
	return listAll(ctx, hc.c, routePath(apiv1.RouteListHosts, ""), nil, func(l apiv1.HostList) ([]apiv1.Host, string) { return l.Items, l.NextCursor })
}

// Get returns one host.
func (hc HostClient) Get(ctx context.Context, id string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetHost, id), nil, nil, &h)
	return h, err
}

// Drain stops placing sessions on a host and returns it.
func (hc HostClient) Drain(ctx context.Context, id string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteDrainHost, id), nil, nil, &h)
	return h, err
}

// Undrain clears a host's drain flag (Drain's) and returns it.
func (hc HostClient) Undrain(ctx context.Context, id string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteUndrainHost, id), nil, nil, &h)
	return h, err
}

// Disable takes a host (id or name) out of service now: its link is
// closed, nothing is placed on it and its sessions move through HostLost.
func (hc HostClient) Disable(ctx context.Context, host string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteDisableHost, host), nil, nil, &h)
	return h, err
}

// Enable lets a disabled host (id or name) work again once it reconnects.
func (hc HostClient) Enable(ctx context.Context, host string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteEnableHost, host), nil, nil, &h)
	return h, err
}

// Delete deletes a host (id or name) as Disable does, revoking its tokens
// and freeing its name; it returns the host, deleted.
func (hc HostClient) Delete(ctx context.Context, host string) (apiv1.Host, error) {
	var h apiv1.Host
	err := hc.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteHost, host), nil, nil, &h)
	return h, err
}

// Create registers a host name; the answer's Token is shown only once.
func (hc HostClient) Create(ctx context.Context, name string) (apiv1.CreateHostResponse, error) {
	var r apiv1.CreateHostResponse
	err := hc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateHost, ""), nil, apiv1.CreateHostRequest{Name: name}, &r)
	return r, err
}

// TokenClient calls the API token routes. Client.Tokens returns one.
type TokenClient struct{ c *Client }

// Tokens returns the client of the API token routes.
func (c *Client) Tokens() TokenClient { return TokenClient{c} }

// Create makes a personal key with the caller's role; the answer's Secret
// is shown only once.
func (tk TokenClient) Create(ctx context.Context, name string) (apiv1.CreateTokenResponse, error) {
	return tk.CreateKey(ctx, apiv1.CreateTokenRequest{Name: name})
}

// CreateKey makes a personal or service key with a role and an expiry.
func (tk TokenClient) CreateKey(ctx context.Context, req apiv1.CreateTokenRequest) (apiv1.CreateTokenResponse, error) {
	var r apiv1.CreateTokenResponse
	err := tk.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateToken, ""), nil, req, &r)
	return r, err
}

// List lists tokens (without secrets).
func (tk TokenClient) List(ctx context.Context) ([]apiv1.Token, error) {
	return listAll(ctx, tk.c, routePath(apiv1.RouteListTokens, ""), nil, func(l apiv1.TokenList) ([]apiv1.Token, string) { return l.Items, l.NextCursor })
}

// Revoke revokes a token.
func (tk TokenClient) Revoke(ctx context.Context, id string) error {
	return tk.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteRevokeToken, id), nil, nil, nil)
}
