package vmnet

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tunGetDevNetNS is TUNGETDEVNETNS, _IO('T', 227): the network namespace
// of a TAP fd's device (Linux 5.2).
const tunGetDevNetNS = 0x54e3

// Rejoin takes back the Net of a machine whose VMM (process pid) still
// runs on the TAP it inherited as its fd number fd, after the agent that
// made it exited: a copy of that fd (pidfd_getfd, Linux 5.6) leads to the
// namespace (TUNGETDEVNETNS), whose TAP and rules are still in place;
// the rules are written again (one transaction, so no packet sees none),
// so a namespace an older agent made logs its drops too. Its listeners
// and drop log went with the old agent; the caller opens new ones with
// Listen, ListenPacket and Drops (cfg must name the ports New was given:
// its rules redirect there). Close removes it all, as New's: call it once
// the VMM has exited.
func Rejoin(ctx context.Context, cfg Config, pid, fd int) (*Net, error) {
	cfg = cfg.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rejoin machine network: %w", err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("rejoin machine network: open VMM process %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	tapfd, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("rejoin machine network: copy fd %d of VMM process %d: %w", fd, pid, err)
	}
	tap := os.NewFile(uintptr(tapfd), "tap")
	n := &Net{cfg: cfg, tap: tap, ns: nsHandles{machine: -1, agent: -1}}
	if n.ns.machine, err = unix.IoctlRetInt(tapfd, tunGetDevNetNS); err != nil {
		tap.Close()
		return nil, fmt.Errorf("rejoin machine network: fd %d of VMM process %d is no TAP device: %w", fd, pid, err)
	}
	if n.ns.agent, err = agentNS(); err != nil {
		n.Close()
		return nil, fmt.Errorf("rejoin machine network: %w", err)
	}
	if n.tapIndex, err = tapIndex(n.ns.machine); err != nil {
		n.Close()
		return nil, fmt.Errorf("rejoin machine network: %w", err)
	}
	if err := installRules(n.ns.machine, n.tapIndex, cfg.ProxyPort, cfg.ResolverPort); err != nil {
		n.tapIndex = 0 // the VMM still uses the TAP (and the old rules, which a failed transaction left): Close must not delete it
		n.Close()
		return nil, fmt.Errorf("rejoin machine network: %w", err)
	}
	return n, nil
}

// agentNS opens the network namespace the agent's threads run in (an
// unlocked thread is never in a machine's).
func agentNS() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open(threadNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the agent's network namespace: %w", err)
	}
	return fd, nil
}

// tapIndex is the index of TapName in namespace ns: a rejoined namespace
// must be one New made.
func tapIndex(ns int) (int, error) {
	h, err := netlink.NewHandleAt(netns.NsHandle(ns), unix.NETLINK_ROUTE)
	if err != nil {
		return 0, fmt.Errorf("netlink in the machine's namespace: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(TapName)
	if err != nil {
		return 0, fmt.Errorf("find %s: %w", TapName, err)
	}
	return link.Attrs().Index, nil
}
