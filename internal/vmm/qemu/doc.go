// Package qemu is the vmm.Backend that runs guests in QEMU microvm machines (KVM or
// TCG) over QMP and a virtio-serial guest port. Snapshots (a migration file, the qcow2
// overlay, a config naming images by content) name no host path: any host restores them.
package qemu
