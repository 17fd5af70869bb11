package vmnet

import (
	"errors"
	"fmt"
	"os"
)

// ErrUnavailable: this host cannot make machine networks (not root, no
// network namespaces, no /dev/net/tun).
var ErrUnavailable = errors.New("machine networks unavailable")

// Available says whether New can work here: it makes a namespace with a
// TAP device and removes it again. The error wraps ErrUnavailable and
// says what is missing.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (network namespaces and TAP devices need CAP_SYS_ADMIN and CAP_NET_ADMIN)", ErrUnavailable)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	h, err := inNewNS(func() error {
		f, err := openTap(TapName)
		if err == nil {
			f.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	h.close()
	return nil
}
