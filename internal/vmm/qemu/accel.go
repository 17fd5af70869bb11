package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// accelProbe is the cached result of a KVM boot probe.
type accelProbe struct {
	Key    string `json:"key"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
}

// kvmUsable checks /dev/kvm without booting anything.
func kvmUsable() (bool, string) {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return false, "/dev/kvm is kvm_pvm (paravirtual nested KVM), which cannot run stock guest kernels"
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Sprintf("no usable /dev/kvm: %v", err)
	}
	f.Close()
	return true, ""
}

// chooseAccel decides between KVM and TCG, probing a KVM boot once per
// host and caching the answer in the data directory.
func (b *Backend) chooseAccel(ctx context.Context) (accel, reason string) {
	switch b.cfg.Accel {
	case "tcg":
		return "tcg", "tcg: configured"
	case "kvm":
		return "kvm", "kvm: configured"
	}
	ok, why := kvmUsable()
	if !ok {
		return "tcg", "tcg software emulation: " + why
	}
	key := b.version + "|" + b.cfg.Images.Kernel
	cache := filepath.Join(b.cfg.DataDir, "qemu-accel.json")
	var p accelProbe
	if data, err := os.ReadFile(cache); err == nil && json.Unmarshal(data, &p) == nil && p.Key == key {
		return pick(p)
	}
	p = accelProbe{Key: key}
	if err := b.probeKVM(ctx); err != nil {
		p.Reason = fmt.Sprintf("KVM boot probe failed: %v", err)
	} else {
		p.OK, p.Reason = true, "KVM boot probe succeeded"
	}
	if data, err := json.Marshal(p); err == nil {
		_ = os.WriteFile(cache, data, 0o644)
	}
	return pick(p)
}

func pick(p accelProbe) (string, string) {
	if p.OK {
		return "kvm", "kvm: " + p.Reason
	}
	return "tcg", "tcg software emulation: " + p.Reason
}

// probeKVM boots one small KVM machine and waits for init to answer on
// the control port within a short deadline.
func (b *Backend) probeKVM(ctx context.Context) error {
	dir, err := os.MkdirTemp(b.cfg.DataDir, "kvm-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	spec := vmm.Spec{SessionID: "kvm-probe", Dir: dir, MemoryMiB: 256, VCPUs: 1}
	// QEMU refuses to start without the root disk's overlay.
	if err := vmimage.Overlay(ctx, b.cfg.QemuImg, b.cfg.Images.RootFS, filepath.Join(dir, fileDisk)); err != nil {
		return err
	}
	m, err := b.start(ctx, spec, "kvm", b.cfg.Images.RootFS, "", nil) // no harness disk: nothing to mount
	if err != nil {
		return err
	}
	defer m.Destroy(context.Background())
	_, err = sendControl(ctx, m.path(fileCtl), newControl(1, "", nil))
	return err
}
