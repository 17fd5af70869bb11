// Package guest is the guest daemon (engrams-guest): it serves the guestapi
// routes (readiness, exec with optional PTY, file transfer) on any listener,
// including a yamux session over a virtio-serial byte stream.
package guest
