// Package hoststate is the host state machine: one pure function decides every change of a host's
// state from (state, event). It imports only internal/domain; the store writes its answers (in SQL,
// over many hosts at once) and the API asks it before an admin's drain.
package hoststate
