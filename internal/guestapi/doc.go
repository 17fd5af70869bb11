// Package guestapi is the versioned contract of the guest daemon: the HTTP
// routes, the exec/terminal stream framing and a client that speaks it over
// any stream transport.
package guestapi
