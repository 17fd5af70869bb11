// Package host is the host agent: it dials the coordinator, heartbeats under a lease (pausing machines
// when cut off), runs them through a vmm.Backend fenced by epoch, moves snapshots to and from chunks,
// feeds guest outboxes, checks harnesses are ready, relays their events and tunnels gateway calls.
package host
