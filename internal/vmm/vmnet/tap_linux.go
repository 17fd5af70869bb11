package vmnet

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openTap creates the TAP device name in the calling thread's namespace
// and returns its fd: a TAP without packet information or virtio-net
// header (the features QEMU's user networking offers too, so a snapshot's
// negotiated NIC features restore on either). The device is not
// persistent: it goes when the last fd of it closes. It is non-blocking
// (QEMU makes it so anyway), so the Go side can read it with deadlines.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tap %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}
