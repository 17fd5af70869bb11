// Package vmproc handles VMM processes that may outlive host-agent restarts:
// identity by pid plus start time, pidfd exit watches and signals, and the
// spawn marker a restarted agent finds them by. Imported by vmm backends.
package vmproc
