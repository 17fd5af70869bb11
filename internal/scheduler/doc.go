// Package scheduler decides placement: candidates from the hosts and their sessions, the pick, and
// which idle sessions to evict when every host is full (MakeRoom). It is pure (no I/O, no clock; it
// imports only internal/domain), so every rule is table-tested. Imported by the coordinator and image jobs.
package scheduler
