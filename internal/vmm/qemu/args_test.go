package qemu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestinit/initproto"
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
