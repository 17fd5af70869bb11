// Package guest is the guest daemon (engrams-guest): it serves the guestapi routes (readiness, exec,
// files, sync, a durable outbox) on any listener (yamux over virtio-serial too), runs the harness
// adapter (guest/adapter) and hands its gateway listener's connections to host tunnels.
package guest
