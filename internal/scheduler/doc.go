// Package scheduler decides placement: given the hosts that could run a
// session and what each already carries, it picks one. It is pure: no I/O,
// no clock, so every rule is table-tested.
package scheduler
