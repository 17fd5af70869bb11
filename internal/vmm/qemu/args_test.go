package qemu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestinit/initproto"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmnet"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

func mkdirAll(d string) error { return os.MkdirAll(d, 0o755) }

func TestKernelCmdline(t *testing.T) {
	t.Parallel()
	got := kernelCmdline(2300000, guestParams("My_Host.1", false, true))
	for _, w := range []string{"console=ttyS0", "quiet", "cryptomgr.notests", "tsc_early_khz=2300000",
		"panic=-1", "reboot=t", "engrams.root=serial:engrams-root", "engrams.bundle=serial:engrams-bundle",
		"engrams.hostname=myhost1", "engrams.harness=serial:engrams-harness", "engrams.port=engrams", "engrams.ctl=engrams-ctl", "engrams.waitconfig=1"} {
		if !slices.Contains(strings.Fields(got), w) {
			t.Errorf("cmdline %q lacks %q", got, w)
		}
	}
	if strings.Contains(got, "engrams.ip=") {
		t.Errorf("no network but cmdline sets an address: %q", got)
	}
	p, err := initproto.ParseCmdline(got)
	if err != nil || p.Root != "serial:engrams-root" || p.Hostname != "myhost1" || p.Harness != "serial:engrams-harness" {
		t.Errorf("init parses %+v, %v", p, err)
	}
	if strings.Contains(kernelCmdline(0, guestParams("", true, false)), "tsc_early_khz") {
		t.Error("tsc_early_khz without a frequency")
	}
	if got := kernelCmdline(0, guestParams("", true, false)); strings.Contains(got, "engrams.harness") {
		t.Errorf("machine without a harness disk: cmdline %q names one", got)
	}
}

func TestLaunchArgs(t *testing.T) {
	t.Parallel()
	l := launch{Accel: "tcg", MemoryMiB: 256, VCPUs: 1, Kernel: "/k", Initramfs: "/i",
		Bundle: "/b,1", Disk: "/d/disk.qcow2", Memory: "/d,x/memory.ram", PIDFile: "/d/qemu.pid", Cmdline: "quiet", Name: "s1", Network: true}
	a := strings.Join(l.args(), " ")
	for _, w := range []string{"-M microvm", "-accel tcg", "-m 256", "-smp 1", "-nodefaults", "-no-reboot",
		"file=/b,,1,format=raw,if=none,readonly=on", "virtserialport,chardev=guest,name=engrams",
		"user,id=n0,restrict=on", "-qmp unix:qmp.sock,server=on,wait=off", "-daemonize", "-pidfile /d/qemu.pid",
		"-object memory-backend-file,id=mem0,size=256M,mem-path=/d,,x/memory.ram,share=on",
		"-M microvm,memory-backend=mem0"} {
		if !strings.Contains(a, w) {
			t.Errorf("args lack %q:\n%s", w, a)
		}
	}
	if strings.Contains(a, "-incoming") {
		t.Error("boot args have -incoming")
	}
	l.Incoming = true
	args := l.args()
	if got := strings.Join(args[len(args)-2:], " "); got != "-incoming defer" {
		t.Errorf("incoming = %q", got)
	}
	// The device part must not change between boot and restore.
	boot := launch(l)
	boot.Incoming = false
	if !slices.Equal(boot.args(), args[:len(args)-2]) {
		t.Error("restore args differ from boot args beyond -incoming")
	}
}

// TestLaunchArgsNetwork: the NIC's device line is the same on every
// backend (a snapshot restores on either); only its netdev differs.
func TestLaunchArgsNetwork(t *testing.T) {
	t.Parallel()
	base := launch{Accel: "tcg", MemoryMiB: 256, VCPUs: 1, Kernel: "/k", Initramfs: "/i", Bundle: "/b",
		Disk: "/d/disk.qcow2", Memory: "/d/memory.ram", PIDFile: "/d/qemu.pid", Cmdline: "quiet", Name: "s1"}
	device := "virtio-net-device,netdev=n0,mac=" + vmnet.GuestMAC.String()
	for _, tt := range []struct {
		name    string
		network bool
		tapFD   int
		netdev  string // "" : no NIC at all
	}{
		{"no NIC", false, 0, ""},
		{"restricted user networking", true, 0, "user,id=n0,restrict=on"},
		{"a TAP", true, 3, "tap,id=n0,fd=3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := base
			l.Network, l.TapFD = tt.network, tt.tapFD
			a := l.args()
			var netdevs []string
			for i := range a {
				if a[i] == "-netdev" {
					netdevs = append(netdevs, a[i+1])
				}
			}
			dev := slices.Index(a, device)
			if tt.netdev == "" {
				if len(netdevs) > 0 || strings.Contains(strings.Join(a, " "), "virtio-net") {
					t.Errorf("a machine without a NIC has one: %q", a)
				}
				return
			}
			if !slices.Contains(netdevs, tt.netdev) || dev < 0 {
				t.Errorf("netdev %q and device %q wanted in %q", tt.netdev, device, a)
			}
			// User networking is there either way (its state is in every
			// snapshot's stream), the NIC's own only without a TAP.
			want := []string{tt.netdev}
			if tt.tapFD > 0 {
				want = []string{"user,id=spare0,restrict=on", tt.netdev}
			}
			if !slices.Equal(netdevs, want) {
				t.Errorf("netdevs %q, want %q", netdevs, want)
			}
		})
	}
}

// TestGuestAddressesMatchVmnet: what the guest is told (kernel command
// line, control message) is what every machine namespace expects.
func TestGuestAddressesMatchVmnet(t *testing.T) {
	t.Parallel()
	p := initproto.DefaultParams()
	if p.Address != vmnet.GuestPrefixString() || p.Gateway != vmnet.HostAddr.String() {
		t.Errorf("guest %s via %s; vmnet has %s via %s", p.Address, p.Gateway, vmnet.GuestPrefixString(), vmnet.HostAddr)
	}
	if guestMAC != vmnet.GuestMAC.String() {
		t.Errorf("guest MAC %s, vmnet's %s", guestMAC, vmnet.GuestMAC)
	}
}

func TestCPUKHz(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "cpuinfo")
	os.WriteFile(p, []byte("processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2445.404\n"), 0o644)
	if k, err := cpuKHz(p); err != nil || k != 2445404 {
		t.Errorf("cpuKHz = %d, %v", k, err)
	}
	os.WriteFile(p, []byte("processor\t: 0\n"), 0o644)
	if _, err := cpuKHz(p); err == nil {
		t.Error("want an error without cpu MHz")
	}
}

func TestProcStartTime(t *testing.T) {
	t.Parallel()
	st, err := vmproc.StartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("vmproc.StartTime(self) = %d, %v", st, err)
	}
	if !vmproc.Alive(os.Getpid(), st) || vmproc.Alive(os.Getpid(), st+1) {
		t.Error("sameProcess disagrees with procStartTime")
	}
}

func TestCappedLog(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "serial.log")
	w := &cappedLog{path: p, max: 100}
	for i := 0; i < 50; i++ {
		w.Write([]byte("0123456789"))
	}
	w.close()
	a, _ := os.Stat(p)
	b, _ := os.Stat(p + ".1")
	if a == nil || b == nil || a.Size() > 110 || b.Size() > 110 {
		t.Errorf("log not bounded: %v %v", a, b)
	}
}

func TestAttemptLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    int
		want time.Duration
	}{{0, 100 * time.Millisecond}, {1, 200 * time.Millisecond}, {4, 1600 * time.Millisecond}, {5, 3 * time.Second}, {100, 3 * time.Second}} {
		if got := attemptLimit(tt.n); got != tt.want {
			t.Errorf("attemptLimit(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestNormalizeRefusesANetworkWithoutTap(t *testing.T) {
	t.Parallel()
	if _, err := normalize(vmm.Spec{Dir: "/d", Network: &vmm.Network{}}); err == nil {
		t.Error("a Spec.Network without a TAP accepted")
	}
	if _, err := normalize(vmm.Spec{Dir: "/d", Network: &vmm.Network{Tap: os.Stdin}}); err != nil {
		t.Errorf("a Spec.Network with a TAP: %v", err)
	}
}
