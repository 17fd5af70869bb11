package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var noDeadline time.Time

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot), which with the pid identifies a process uniquely.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may contain spaces
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: short", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// sameProcess reports whether pid is still the (living, not zombie)
// process that started at start.
func sameProcess(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := procStartTime(pid)
	if err != nil || st != start {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// readPIDFile reads QEMU's -pidfile.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid file %s: %q", path, b)
	}
	return pid, nil
}

// watchExit closes done when the process pid exits. It uses a pidfd, so it
// works for processes that are not our children (QEMU daemonizes).
func watchExit(pid int, start uint64, done chan<- struct{}) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil || !sameProcess(pid, start) {
		if err == nil {
			unix.Close(fd)
		}
		close(done)
		return
	}
	go func() {
		defer unix.Close(fd)
		defer close(done)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
}

// killProcess sends SIGKILL to pid if it still is the process started at start.
func killProcess(pid int, start uint64) {
	if !sameProcess(pid, start) {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if sameProcess(pid, start) { // the pidfd now pins this exact process
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// waitGone waits until the process is gone or d passes.
func waitGone(pid int, start uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for sameProcess(pid, start) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

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
