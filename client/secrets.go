package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// SecretClient calls the secret routes. Client.Secrets returns one.
type SecretClient struct{ c *Client }

// Secrets returns the client of the secret routes.
func (c *Client) Secrets() SecretClient { return SecretClient{c} }

// Create stores a secret; req.Value is sent once, sealed by the
// server and never returned.
func (sk SecretClient) Create(ctx context.Context, req apiv1.CreateSecretRequest) (apiv1.Secret, error) {
	var s apiv1.Secret
	err := sk.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateSecret, ""), nil, req, &s)
	return s, err
}

// List lists the live secrets by name (never their values).
func (sk SecretClient) List(ctx context.Context) ([]apiv1.Secret, error) {
	return listAll(ctx, sk.c, routePath(apiv1.RouteListSecrets, ""), nil, func(l apiv1.SecretList) ([]apiv1.Secret, string) { return l.Items, l.NextCursor })
}

// Delete deletes a secret by name or id; UsedBy in the answer lists
// the profiles that named it.
func (sk SecretClient) Delete(ctx context.Context, name string) (apiv1.Secret, error) {
	var s apiv1.Secret
	err := sk.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteSecret, name), nil, nil, &s)
	return s, err
}
