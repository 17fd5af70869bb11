package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var noDeadline time.Time

// cgroupRoot is where cgroup v2 is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupUsable says whether a unified cgroup v2 hierarchy is writable here.
func cgroupUsable() (bool, string) {
	ctrl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return false, "no cgroup v2 hierarchy at " + cgroupRoot
	}
	c := string(ctrl)
	if !strings.Contains(c, "memory") || !strings.Contains(c, "cpu") {
		return false, "cgroup v2 lacks the memory or cpu controller"
	}
	if unix.Access(cgroupRoot, unix.W_OK) != nil {
		return false, "cgroup v2 hierarchy is not writable"
	}
	return true, ""
}

// placeInCgroup creates <parent>/<name> with memory.max and cpu.max and
// moves pid into it. It returns the cgroup directory.
func placeInCgroup(parent, name string, pid int, memBytes int64, vcpus int) (string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	// Enable the controllers for children (harmless if already on).
	_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory +cpu"), 0)
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	writes := [][2]string{
		{"memory.max", strconv.FormatInt(memBytes, 10)},
		{"cpu.max", fmt.Sprintf("%d 100000", vcpus*100000)},
		{"cgroup.procs", strconv.Itoa(pid)},
	}
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("cgroup %s: %w", w[0], err)
		}
	}
	return dir, nil
}

// cgroupName is the cgroup of the QEMU process pid of session sid.
func cgroupName(sid string, pid int) string {
	return "vm-" + sanitizeHostname(sid) + "-" + strconv.Itoa(pid)
}
