package initproto

import (
	"fmt"
	"strings"
)

// Params are what the host tells init on the kernel command line.
type Params struct {
	Root         string // root block device, e.g. /dev/vda
	RootFSType   string // e.g. ext4
	Bundle       string // bundle block device, mounted read-only at BundleDir
	BundleFSType string
	// Harness is the harness disk (e.g. "serial:engrams-harness"), mounted
	// read-only (HarnessFSType) at HarnessDir after the root is switched;
	// empty: the machine has none (other backends, older hosts).
	Harness    string
	Port       string // virtio-serial port name the guest daemon serves on
	CtlPort    string // virtio-serial port name of the control channel
	Address    string // eth0 address in CIDR form, e.g. 10.0.2.15/24; empty: no network
	Gateway    string // default gateway, e.g. 10.0.2.2
	Hostname   string
	WaitConfig bool // wait (bounded) for the host's first Control before starting the daemon
}

// Fixed guest paths.
const (
	BundleDir  = "/.engrams"
	DaemonPath = BundleDir + "/engrams-guest"
	// HarnessDir is where the harness bundle is mounted
	// (guestapi.HarnessMountPoint), HarnessFSType its file system.
	HarnessDir    = "/.engrams-harness"
	HarnessFSType = "erofs"
	DaemonLog     = "/var/log/engrams-guest.log"
	InitLog       = "/var/log/engrams-init.log"
	EnvFile       = "/run/engrams/env"
	DefaultPort   = "engrams"
	DefaultCtl    = "engrams-ctl"
	cmdlinePrefx  = "engrams."
)

// ModuleList is the initramfs file naming the modules to load, in order
// (written by vmimage).
const ModuleList = "/etc/engrams/modules"

// DefaultParams are the values for a microvm with slirp networking.
func DefaultParams() Params {
	return Params{
		Root: "/dev/vda", RootFSType: "ext4", Bundle: "/dev/vdb", BundleFSType: "ext4",
		Port: DefaultPort, CtlPort: DefaultCtl, Address: "10.0.2.15/24", Gateway: "10.0.2.2",
		Hostname: "engrams", WaitConfig: true,
	}
}

// KernelArgs renders p as kernel command-line words (engrams.key=value).
func (p Params) KernelArgs() []string {
	kv := [][2]string{
		{"root", p.Root}, {"rootfstype", p.RootFSType}, {"bundle", p.Bundle},
		{"bundlefstype", p.BundleFSType}, {"harness", p.Harness}, {"port", p.Port}, {"ctl", p.CtlPort},
		{"ip", p.Address}, {"gw", p.Gateway}, {"hostname", p.Hostname},
	}
	var out []string
	for _, e := range kv {
		if e[1] != "" {
			out = append(out, cmdlinePrefx+e[0]+"="+e[1])
		}
	}
	if p.WaitConfig {
		out = append(out, cmdlinePrefx+"waitconfig=1")
	}
	return out
}

// ParseCmdline reads engrams.* words from a kernel command line. Unknown
// engrams.* keys are an error so a host/init mismatch is loud.
func ParseCmdline(cmdline string) (Params, error) {
	var p Params
	for _, w := range strings.Fields(cmdline) {
		if !strings.HasPrefix(w, cmdlinePrefx) {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimPrefix(w, cmdlinePrefx), "=")
		switch k {
		case "root":
			p.Root = v
		case "rootfstype":
			p.RootFSType = v
		case "bundle":
			p.Bundle = v
		case "bundlefstype":
			p.BundleFSType = v
		case "harness":
			p.Harness = v
		case "port":
			p.Port = v
		case "ctl":
			p.CtlPort = v
		case "ip":
			p.Address = v
		case "gw":
			p.Gateway = v
		case "hostname":
			p.Hostname = v
		case "waitconfig":
			p.WaitConfig = v == "1"
		default:
			return p, fmt.Errorf("parse cmdline: unknown key engrams.%s", k)
		}
	}
	if p.Port == "" {
		p.Port = DefaultPort
	}
	return p, nil
}
