package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// SignInClient calls the sign-in routes the CLI uses. Client.SignIn
// returns one; they need no key.
type SignInClient struct{ c *Client }

// SignIn returns the client of the sign-in routes.
func (c *Client) SignIn() SignInClient { return SignInClient{c} }

// Config says how to sign in at the coordinator.
func (sc SignInClient) Config(ctx context.Context) (apiv1.AuthConfig, error) {
	var r apiv1.AuthConfig
	err := sc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteAuthConfig, ""), nil, nil, &r)
	return r, err
}

// TradeIDToken trades a fresh ID token from the provider's device flow
// for a personal key.
func (sc SignInClient) TradeIDToken(ctx context.Context, req apiv1.CLISignInRequest) (apiv1.CreateTokenResponse, error) {
	var r apiv1.CreateTokenResponse
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCLISignIn, ""), nil, req, &r)
	return r, err
}
