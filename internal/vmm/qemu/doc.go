// Package qemu is the vmm.Backend that runs guests in QEMU microvm machines (KVM when
// usable, TCG otherwise), controlled over QMP, with the guest daemon reached over a
// virtio-serial port; snapshots are QMP migrations to a file plus the qcow2 overlay.
package qemu
