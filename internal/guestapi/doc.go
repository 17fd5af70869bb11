// Package guestapi is the versioned contract of the guest daemon: the HTTP routes, the
// exec/terminal stream framing, a client that speaks it over any stream transport, and
// what the guest reads of a harness bundle (harness.json, the shell harness's line protocol).
package guestapi
