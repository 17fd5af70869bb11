// Package coordinator is the session control plane: the op log under fencing epochs, lifecycle
// and snapshot ops, the outbox, the heartbeat monitor, GC and the host-link handlers. State is in
// the store. Imported by the API, the capability packages' wiring and cmd/; it imports none of them.
package coordinator
