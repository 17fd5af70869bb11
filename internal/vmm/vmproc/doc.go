// Package vmproc handles VMM processes that may not be our children (they
// outlive host-agent restarts): identity by pid plus start time, exit
// watching through a pidfd, and signals that can never hit a reused pid.
package vmproc
