// Package machines is the host agent's machine registry: machines by session, capacity reservations,
// fencing epochs (persisted, pruned) and machine records on disk.
// Imported by package host and its sub-packages only.
package machines
