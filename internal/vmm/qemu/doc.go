// Package qemu is the vmm.Backend that runs guests in QEMU microvm machines (KVM or
// TCG) over QMP and a virtio-serial guest port. Snapshots (the raw RAM file, a device-state
// stream, the qcow2 overlay, a config naming images by content) name no host path.
package qemu
