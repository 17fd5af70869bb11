// Package initproto is what the host and the guest's stage-1 init (internal/guestinit) agree on: boot
// parameters on the kernel command line, the control port's messages and the fixed guest paths.
// Portable; the vmm backends, vmimage and guestinit import it.
package initproto
