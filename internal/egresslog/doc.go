// Package egresslog keeps each session's egress log: the host-link route where a session's host reports every
// DNS query and connection of its guest (fenced, validated, rate-limited, bounded per session), the metric,
// and paged reads of it. Imported by the API (through an interface) and the server's wiring.
package egresslog
