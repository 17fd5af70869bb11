// Package guest is the guest daemon (engrams-guest): it serves the guestapi
// routes (readiness, exec with optional PTY, file transfer, sync, a durable
// outbox) on any listener, including a yamux session over virtio-serial.
package guest
