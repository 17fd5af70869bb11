// Package vmnet gives one machine its network path: a network namespace of its own holding only a
// TAP device for the guest's NIC, with nftables rules that send all the guest's TCP to one proxy port
// and its DNS to one resolver port and drop (and log, for Drops) the rest. Imported by vmm, host, cmd.
package vmnet
