// Package api serves the public REST API (JSON, SSE, WebSockets for exec): authentication, input
// checks, one router per resource over the small interface of its service, and the mapping of
// results and error categories to HTTP. Wire types live in api/apiv1. Imported by internal/server.
package api
