// Package process is the development vmm backend: the guest daemon runs as a
// plain host process over a Unix socket, with NO isolation at all. Snapshots
// keep the disk (a copy of the guest's root directory) but not memory.
package process
