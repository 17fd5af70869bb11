// Package host is the host agent: it dials the coordinator, registers facts
// and capacity, heartbeats, and runs session machines through a vmm.Backend,
// fencing every command with the session's epoch.
package host
