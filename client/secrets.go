package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// CreateSecret stores a secret; req.Value is sent once, sealed by the
// server and never returned.
func (c *Client) CreateSecret(ctx context.Context, req apiv1.CreateSecretRequest) (apiv1.Secret, error) {
	var s apiv1.Secret
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateSecret, ""), nil, req, &s)
	return s, err
}

// ListSecrets lists the live secrets by name (never their values).
func (c *Client) ListSecrets(ctx context.Context) ([]apiv1.Secret, error) {
	var l apiv1.SecretList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListSecrets, ""), nil, nil, &l)
	return l.Secrets, err
}

// DeleteSecret deletes a secret by name or id; UsedBy in the answer lists
// the profiles that named it.
func (c *Client) DeleteSecret(ctx context.Context, name string) (apiv1.Secret, error) {
	var s apiv1.Secret
	err := c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteSecret, name), nil, nil, &s)
	return s, err
}
