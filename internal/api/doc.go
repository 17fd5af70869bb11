// Package api serves the public REST API (JSON, SSE event streams, and
// WebSockets for exec): authentication, input checks, and the mapping of
// coordinator and store results to HTTP. Wire types live in api/apiv1.
package api
