// Package oidctest is an OIDC provider for tests (discovery, JWKS, code + S256 PKCE, device flow, RS256 ID
// tokens) written from the OIDC and RFC 7636/8628 specs, on 127.0.0.1, with knobs to misbehave.
// Imported only from _test.go files.
package oidctest
