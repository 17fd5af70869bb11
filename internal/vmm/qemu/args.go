package qemu

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// File names inside a machine's directory. QEMU runs with that directory
// as its working directory and gets relative socket paths, so long
// directory names never hit the unix socket path limit.
const (
	fileQMP     = "qmp.sock"
	fileGuest   = "guest.sock"
	fileGuest2  = "guest2.sock" // after a Recover rebind
	fileCtl     = "ctl.sock"
	fileSerial  = "serial.sock"
	fileSerLog  = "serial.log"
	filePID     = "qemu.pid"
	fileDisk    = "disk.qcow2"
	fileMemory  = "memory.ram" // guest RAM (memory-backend-file, share=on): sparse, offset-stable
	fileMachine = "machine.json"
)

// Disk serial numbers, so init finds the disks whatever order the kernel
// probes them in.
const (
	serialRoot   = "engrams-root"
	serialBundle = "engrams-bundle"
)

// launch is everything one QEMU command line depends on.
type launch struct {
	QEMU      string
	Accel     string // "kvm" or "tcg"
	MemoryMiB int
	VCPUs     int
	Kernel    string
	Initramfs string
	Bundle    string
	Disk      string // qcow2 overlay (absolute: QEMU chdirs to / when daemonized)
	Harness   string // read-only qcow2 view of the harness image (absolute); "" for no harness disk
	Memory    string // guest RAM file (absolute), mapped shared
	PIDFile   string
	Cmdline   string
	Name      string
	Network   bool // the machine has a NIC
	TapFD     int  // > 0: the NIC's backend is this inherited TAP fd; else restricted user networking
	Incoming  bool // start with -incoming defer (restore); false to boot
}

// guestMAC is the NIC's address on every machine (QEMU's default for a
// first NIC, vmnet.GuestMAC), explicit so boots and restores agree.
const guestMAC = "52:54:00:12:34:56"

// memBackend is the id of the guest RAM backend object.
const memBackend = "mem0"

// args renders the QEMU command line (without the binary). The device
// part must be identical between a snapshot's source and its restore.
func (l launch) args() []string {
	a := []string{
		"-name", "engrams-" + qemuEscape(l.Name),
		// RAM is a shared file mapping: page i of guest memory is at offset
		// i*4096 of the file whatever else changes, so fixed-size chunks of
		// it dedup across snapshots, and migration skips it (x-ignore-shared).
		"-object", fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=%s,share=on", memBackend, l.MemoryMiB, qemuEscape(l.Memory)),
		"-M", "microvm,memory-backend=" + memBackend, "-accel", l.Accel, "-cpu", "max",
		"-smp", strconv.Itoa(l.VCPUs), "-m", strconv.Itoa(l.MemoryMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", l.Kernel, "-initrd", l.Initramfs, "-append", l.Cmdline,
		"-chardev", "socket,id=serial0,path=" + fileSerial + ",server=on,wait=off",
		"-serial", "chardev:serial0",
		"-drive", "id=root,file=" + qemuEscape(l.Disk) + ",format=qcow2,if=none,cache=writeback,discard=unmap",
		"-device", "virtio-blk-device,drive=root,serial=" + serialRoot,
		"-drive", "id=bundle,file=" + qemuEscape(l.Bundle) + ",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=bundle,serial=" + serialBundle,
	}
	if l.Harness != "" {
		a = append(a, "-drive", "id=harness,file="+qemuEscape(l.Harness)+",format=qcow2,if=none,readonly=on",
			"-device", "virtio-blk-device,drive=harness,serial="+serialHarness)
	}
	a = append(a,
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=guest,path="+fileGuest+",server=on,wait=off",
		"-device", "virtserialport,chardev=guest,name="+initproto.DefaultPort,
		"-chardev", "socket,id=ctl,path="+fileCtl+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctl,name="+initproto.DefaultCtl,
	)
	if l.Network {
		// Only the NIC is device state; its backend may differ between a
		// snapshot's source and its restore. The TAP has no virtio-net
		// header, so both backends offer the guest the same features.
		// User networking saves its own state in the migration stream,
		// which a restore must be able to load: a machine on a TAP keeps
		// a spare restricted one, attached to nothing.
		a = append(a, "-netdev", "user,id="+userNetdev(l.TapFD > 0)+",restrict=on")
		if l.TapFD > 0 {
			a = append(a, "-netdev", "tap,id=n0,fd="+strconv.Itoa(l.TapFD))
		}
		a = append(a, "-device", "virtio-net-device,netdev=n0,mac="+guestMAC)
	}
	a = append(a, "-qmp", "unix:"+fileQMP+",server=on,wait=off", "-pidfile", l.PIDFile, "-daemonize")
	if l.Incoming {
		// The device state comes later over QMP (migrate-incoming), after
		// x-ignore-shared is set: it must match the source's.
		a = append(a, "-incoming", "defer")
	}
	return a
}

// userNetdev is the id of the user networking backend: the NIC's (n0),
// or the spare beside a TAP.
func userNetdev(tap bool) string {
	if tap {
		return "spare0"
	}
	return "n0"
}

// kernelCmdline is the guest kernel command line.
func kernelCmdline(tscKHz int64, p initproto.Params) string {
	w := []string{"console=ttyS0", "reboot=t", "panic=-1", "quiet", "cryptomgr.notests"}
	if tscKHz > 0 {
		// microvm has no HPET or PM timer: without the hint TSC calibration
		// fails under TCG in about 2 boots of 5 and the kernel hangs.
		w = append(w, "tsc_early_khz="+strconv.FormatInt(tscKHz, 10))
	}
	return strings.Join(append(w, p.KernelArgs()...), " ")
}

// guestParams are the init parameters for a machine (harness: it has a
// harness disk).
func guestParams(hostname string, network, harness bool) initproto.Params {
	p := initproto.DefaultParams()
	p.Root = "serial:" + serialRoot
	p.Bundle = "serial:" + serialBundle
	if harness {
		p.Harness = "serial:" + serialHarness
	}
	if hostname != "" {
		p.Hostname = sanitizeHostname(hostname)
	}
	if !network {
		p.Address, p.Gateway = "", ""
	}
	return p
}

func sanitizeHostname(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	if s == "" {
		s = "engrams"
	}
	return s
}

// cpuKHz reads the first "cpu MHz" of a /proc/cpuinfo-formatted file.
func cpuKHz(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read cpu frequency: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("read cpu frequency: %w", err)
			}
			return int64(mhz * 1000), nil
		}
	}
	return 0, fmt.Errorf("read cpu frequency: no \"cpu MHz\" in %s", path)
}

// qemuEscape doubles commas, QEMU's option-value escape.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// shellQuote quotes s for sh -c (QEMU runs exec: URIs through /bin/sh).
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
