// Package signin signs people in: browsers by OIDC (code + PKCE) or a login link into a hashed sign-in cookie,
// the CLI by trading a device-flow ID token for a personal key; a verified email maps to an existing member.
// Imported by internal/server, which wires it; the API mounts its routes through a small interface.
package signin
