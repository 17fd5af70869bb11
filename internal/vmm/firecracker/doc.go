// Package firecracker is the vmm.Backend that runs guests in Firecracker microVMs (directly
// or under the jailer), configured over Firecracker's API socket with a hand-written client;
// the guest daemon is reached over vsock, snapshots are Firecracker memory + state files.
package firecracker
