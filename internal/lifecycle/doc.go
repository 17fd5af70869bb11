// Package lifecycle is the session state machine: one pure function decides every transition from
// (state, event). It imports only internal/domain and does no I/O; the coordinator applies its
// answer to the store under the session's fencing epoch.
package lifecycle
