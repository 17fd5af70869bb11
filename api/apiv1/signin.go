package apiv1

// Sign-in (issue 27): a browser signs in with the organisation's identity
// provider (OIDC authorization code + PKCE) or a one-time login link, and
// gets an opaque sign-in cookie; the CLI signs in by the provider's device
// flow and exchanges the ID token for a personal key.
const (
	RouteAuthConfig   = "GET /v1/auth/config"        // -> AuthConfig: how to sign in here
	RouteOIDCStart    = "GET /v1/auth/oidc/start"    // ?next=/path: redirects to the identity provider
	RouteOIDCCallback = "GET /v1/auth/oidc/callback" // the provider's redirect: sets the sign-in cookie, redirects to next
	RouteCLISignIn    = "POST /v1/auth/cli"          // CLISignInRequest -> CreateTokenResponse (201)
	RouteSignOut      = "POST /v1/auth/signout"      // ends this browser's sign-in: revoked server-side, cookies cleared (204)
)

// The sign-in cookie and its anti-forgery token. SessionCookie is
// HttpOnly (scripts never see the credential); CSRFCookie is readable by
// the dashboard, which sends it back as HeaderCSRF on every write a
// cookie authenticates (a write without it is 403).
const (
	SessionCookie = "engrams_session"
	CSRFCookie    = "engrams_csrf"
	HeaderCSRF    = "X-Engrams-CSRF"
)

// AuthConfig answers RouteAuthConfig. OIDC is false where no identity
// provider is configured (sign in with a login link or a pasted key).
type AuthConfig struct {
	OIDC bool `json:"oidc"`
	// Issuer and the CLI's public client, for the device flow.
	Issuer        string   `json:"issuer,omitempty"`
	CLIClientID   string   `json:"cli_client_id,omitempty"`
	DeviceAuthURL string   `json:"device_authorization_endpoint,omitempty"`
	TokenURL      string   `json:"token_endpoint,omitempty"`
	Scopes        []string `json:"scopes,omitempty"`
}

// CLISignInRequest trades a fresh ID token from the device flow for a
// personal key in the person's organisation.
type CLISignInRequest struct {
	IDToken string `json:"id_token"`
	Name    string `json:"name,omitempty"` // the key's name; default cli-<date>
	Org     string `json:"org,omitempty"`  // an organisation id, when the person is in several
}

// SignedIn answers a sign-in that set the cookie (RouteDashboardLogin).
type SignedIn struct {
	UserID string `json:"user_id"`
	Name   string `json:"name"`
	OrgID  string `json:"org_id"`
	Role   string `json:"role"`
}
