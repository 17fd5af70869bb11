// Package e2e holds end-to-end tests: real coordinator replicas, real host
// agents (in-process and as separate processes), the real guest daemon, and
// real SQLite and Postgres stores, driven through the public API client.
package e2e
