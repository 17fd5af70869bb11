package guestinit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// FindPort returns the /dev/vport* device whose virtio-serial name is name.
func FindPort(name string) (string, error) {
	dirs, _ := filepath.Glob("/sys/class/virtio-ports/vport*")
	sort.Strings(dirs)
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "name"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + filepath.Base(d), nil
		}
	}
	return "", fmt.Errorf("find virtio-serial port %q: not present", name)
}

// applyControl carries out c. It returns the first error but tries every step.
func applyControl(c initproto.Control, setEnv func(map[string]string)) error {
	var errs []string
	if c.TimeUnixNano != 0 {
		tv := unix.NsecToTimeval(c.TimeUnixNano)
		if err := unix.Settimeofday(&tv); err != nil {
			errs = append(errs, "step clock: "+err.Error())
		}
	}
	if len(c.Entropy) > 0 {
		if err := addEntropy(c.Entropy); err != nil {
			errs = append(errs, "reseed rng: "+err.Error())
		}
	}
	if c.Hostname != "" {
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			errs = append(errs, "set hostname: "+err.Error())
		}
	}
	if c.Nameserver != "" {
		if err := writeResolvConf(ResolvConf, c.Nameserver); err != nil {
			errs = append(errs, "write resolv.conf: "+err.Error())
		}
	}
	if c.Env != nil {
		setEnv(c.Env)
		if err := writeEnv(c.Env); err != nil {
			errs = append(errs, "write env: "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// ResolvConf is the resolver configuration init writes for a machine with
// a network.
const ResolvConf = "/etc/resolv.conf"

// writeResolvConf replaces path (a symlink too, e.g. to systemd-resolved's
// stub file) with a file naming only nameserver.
func writeResolvConf(path, nameserver string) error {
	a, err := netip.ParseAddr(nameserver)
	if err != nil || !a.Is4() {
		return fmt.Errorf("nameserver %q is not an IPv4 address", nameserver)
	}
	data := "# written by engrams-init: the machine's only resolver\nnameserver " + a.String() + "\n"
	tmp := path + ".engrams-tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// addEntropy credits b to the input pool (RNDADDENTROPY) and forces a
// CRNG reseed (RNDRESEEDCRNG), so a restored clone diverges at once.
func addEntropy(b []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(b))
	putInt32(buf[0:], int32(len(b)*8))
	putInt32(buf[4:], int32(len(b)))
	copy(buf[8:], b)
	if err := ioctlPtr(f.Fd(), unix.RNDADDENTROPY, buf); err != nil {
		return fmt.Errorf("RNDADDENTROPY: %w", err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.RNDRESEEDCRNG, 0); err != nil {
		return fmt.Errorf("RNDRESEEDCRNG: %w", err)
	}
	return nil
}

func writeEnv(env map[string]string) error {
	if err := os.MkdirAll(filepath.Dir(initproto.EnvFile), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return os.WriteFile(initproto.EnvFile, b, 0o600)
}

func readEnv() map[string]string {
	b, err := os.ReadFile(initproto.EnvFile)
	if err != nil {
		return nil
	}
	var env map[string]string
	if json.Unmarshal(b, &env) != nil {
		return nil
	}
	return env
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// retryDelay is how long the control loop waits when the host end of the
// port is not connected (reads return EOF).
const retryDelay = 20 * time.Millisecond
