// Package vmproc handles VMM processes that may not be our children (they
// outlive host-agent restarts): identity by pid plus start time, exit
// watching through a pidfd, signals that can never hit a reused pid, and
// the environment marker (machine dir and spawn id) by which a restarted
// agent finds every VMM it started, recorded or not.
package vmproc
