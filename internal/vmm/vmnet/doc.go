// Package vmnet gives one machine its network path: a network namespace of its own holding only a
// TAP device for the guest's NIC, with nftables rules that send all the guest's TCP to one proxy port
// and its DNS to one resolver port and drop the rest. Imported by the vmm backends, host and cmd.
package vmnet
