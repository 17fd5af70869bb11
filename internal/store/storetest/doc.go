// Package storetest is the one conformance suite for store.Store: every
// backend's tests call Run (and Postgres also RunShared) so both databases
// keep exactly the same semantics. Bench measures the session hot path.
package storetest
