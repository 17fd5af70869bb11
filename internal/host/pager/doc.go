// Package pager serves lazily restored guest memory over FUSE: chunks on first touch, a working set fetched ahead.
// Imported by internal/host/snapshots (restore and capture) and cmd/engrams (the mount).
package pager
