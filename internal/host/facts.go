package host

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/vmm"
)

// hostFacts describes this host to the coordinator.
func hostFacts(cfg Config, backend vmm.Backend) domain.HostFacts {
	name, _ := os.Hostname()
	model, flags := cpuInfo()
	c := backend.Capabilities()
	bf := domain.BackendFacts{
		Name:         c.Name,
		Version:      c.Version,
		Acceleration: c.Acceleration,
		Isolation:    c.Isolation,
		RootFS:       c.RootFS,
		Harness:      c.Harness,
		Usable:       true,
		Reason:       c.Reason,
	}
	avail := cfg.Considered
	if len(avail) == 0 {
		avail = []domain.BackendFacts{bf}
	}
	return domain.HostFacts{
		Hostname:     name,
		Arch:         runtime.GOARCH,
		CPUModel:     model,
		CPUFlags:     flags,
		Kernel:       kernelRelease(),
		AgentVersion: cfg.AgentVersion,
		Backend:      bf,
		Available:    avail,
	}
}

// cpuInfo reads the first CPU's model name and flags from /proc/cpuinfo.
func cpuInfo() (model string, flags []string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "", nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case model == "" && (k == "model name" || k == "Model" || k == "cpu model"):
			model = v
		case flags == nil && (k == "flags" || k == "Features"):
			flags = strings.Fields(v)
		}
		if model != "" && flags != nil {
			break
		}
	}
	return model, flags
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// detectCapacity fills zero fields of c from this machine.
func detectCapacity(c domain.Capacity) (domain.Capacity, error) {
	if c.VCPUs <= 0 {
		c.VCPUs = runtime.NumCPU()
	}
	if c.MemoryMiB <= 0 {
		mib, err := memTotalMiB()
		if err != nil {
			return c, fmt.Errorf("detect memory (set Capacity.MemoryMiB): %w", err)
		}
		c.MemoryMiB = mib
	}
	c.UsedMemoryMiB, c.UsedVCPUs, c.Sessions = 0, 0, 0
	return c, nil
}

func memTotalMiB() (int, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
		if err != nil {
			return 0, fmt.Errorf("parse MemTotal %q: %w", strings.TrimSpace(rest), err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}
