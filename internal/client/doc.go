// Package client is the Go client of the public REST API (package apiv1):
// one method per route, NDJSON and WebSocket exec, and an SSE event reader
// that resumes with Last-Event-ID.
package client
