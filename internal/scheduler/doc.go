// Package scheduler decides placement: it builds the candidates from the hosts and the sessions
// placed on them, picks one, and, when every host is full, decides which idle sessions to evict
// (suspend) to make room (MakeRoom). It is pure (no I/O, no clock; it imports only internal/domain),
// so every rule is table-tested. Imported by the coordinator and image jobs.
package scheduler
