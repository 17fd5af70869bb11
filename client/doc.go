// Package client is the Go client of the public REST API (package apiv1):
// one sub-client per resource, NDJSON and WebSocket exec, SSE events that
// resume. Any program may import it; it imports nothing internal.
package client
