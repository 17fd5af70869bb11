package vmnet

import (
	"net"
	"net/netip"
)

// The addresses are the same in every machine's namespace, so a snapshot
// taken behind one namespace resumes behind any other, on any host. They
// are those of QEMU's user networking (slirp), which every machine without
// a TAP gets, so a snapshot restores with or without one: the guest's
// kernel keeps its eth0 address, route and gateway's link-layer address
// in the memory a snapshot saves.
var (
	// HostAddr is the TAP's address inside the namespace: the guest's
	// gateway, and where the proxy and the resolver listen.
	HostAddr = netip.MustParseAddr("10.0.2.2")
	// GuestAddr is the guest's eth0 address (GuestPrefix bits).
	GuestAddr = netip.MustParseAddr("10.0.2.15")
	// HostMAC is the TAP's link-layer address, slirp's for 10.0.2.2: a
	// restored guest's ARP entry for its gateway stays right.
	HostMAC = net.HardwareAddr{0x52, 0x55, 0x0a, 0x00, 0x02, 0x02}
	// GuestMAC is the guest NIC's address (QEMU's default for a first
	// NIC), set explicitly so every boot and restore has it.
	GuestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
)

// GuestPrefix is the length of the guest's and the TAP's network prefix.
const GuestPrefix = 24

// TapName is the TAP device's name inside every namespace.
const TapName = "tap0"

// Default ports on HostAddr, inside the namespace only.
const (
	DefaultProxyPort    = 15001
	DefaultResolverPort = 15053
)

// GuestPrefixString is the guest's eth0 address in CIDR form.
func GuestPrefixString() string { return netip.PrefixFrom(GuestAddr, GuestPrefix).String() }
