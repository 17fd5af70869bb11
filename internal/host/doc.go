// Package host is the host agent: it dials the coordinator, heartbeats under a lease (pausing its
// machines when cut off), runs session machines through a vmm.Backend fenced by epoch, and moves
// their snapshots to and from chunks in the blob store; outbox items go to the guest through it.
package host
