// Package coordinator is the session control plane: op log under fencing epochs, lifecycle and
// snapshot ops, outbox, heartbeat monitor, GC, host-link handlers and host access (one live link per
// host, revocation). State is in the store. Imported by the API, the wiring and cmd/; imports none.
package coordinator
