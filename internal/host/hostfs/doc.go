// Package hostfs holds the host agent's durable file primitives: atomic
// replacement with fsync, and names safe as path components. Imported by
// package host and its sub-packages only.
package hostfs
