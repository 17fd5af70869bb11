// Package durable holds the guest daemon's durable file writes: atomic replacement with fsync of
// the file and its directory. Imported by the guest daemon (internal/guest) and its adapter.
package durable
