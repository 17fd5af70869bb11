// Package process is the development vmm backend: the guest daemon runs as a
// plain host process over a Unix socket, with NO isolation at all. Pause stops
// its processes; snapshots keep the disk (a tar of its root) but not memory.
package process
