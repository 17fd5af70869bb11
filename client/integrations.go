package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// IntegrationClient calls the integration routes. Client.Integrations
// returns one.
type IntegrationClient struct{ c *Client }

// Integrations returns the client of the integration routes.
func (c *Client) Integrations() IntegrationClient { return IntegrationClient{c} }

// Add configures a service (again); its credentials are never returned.
func (ic IntegrationClient) Add(ctx context.Context, req apiv1.AddIntegrationRequest) (apiv1.Integration, error) {
	var in apiv1.Integration
	err := ic.c.call(ctx, http.MethodPost, routePath(apiv1.RouteAddIntegration, ""), nil, req, &in)
	return in, err
}

// List lists the configured integrations.
func (ic IntegrationClient) List(ctx context.Context) ([]apiv1.Integration, error) {
	var l apiv1.IntegrationList
	err := ic.c.call(ctx, http.MethodGet, routePath(apiv1.RouteListIntegrations, ""), nil, nil, &l)
	return l.Items, err
}

// Remove forgets an integration.
func (ic IntegrationClient) Remove(ctx context.Context, kind string) error {
	return ic.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteRemoveIntegration, kind), nil, nil, nil)
}
