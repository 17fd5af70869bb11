package firecracker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Process helpers. Small copies of the QEMU backend's: the two backends
// must not depend on each other.

// procStat returns the state letter (field 3) and start time (field 22)
// of /proc/<pid>/stat.
func procStat(pid int) (state string, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may contain spaces and parentheses
	if i < 0 {
		return "", 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", 0, fmt.Errorf("parse /proc/%d/stat: short", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0], start, err
}

// procStartTime is field 22 of /proc/<pid>/stat: with the pid it names one
// process uniquely.
func procStartTime(pid int) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// sameProcess reports whether pid is still the living (not zombie)
// process that started at start.
func sameProcess(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	state, st, err := procStat(pid)
	return err == nil && st == start && state != "Z" && state != "X"
}

// watchExit closes done when pid exits (a pidfd: works for processes that
// are not our children, as after a Recover).
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

// signalGroup sends sig to pid, if it still is the process started at
// start, and to its process group unless that is ours (Firecracker started
// directly leads its own session; under the jailer's --daemonize it is in
// the group of the jailer's exited middle process).
func signalGroup(pid int, start uint64, sig unix.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if !sameProcess(pid, start) { // the pidfd now pins this exact process
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	if pgid, err := unix.Getpgid(pid); err == nil && pgid > 1 && pgid != unix.Getpgrp() {
		_ = unix.Kill(-pgid, sig)
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

// stopProcess sends SIGTERM, waits up to grace, then SIGKILL. It reports
// whether the process is gone.
func stopProcess(pid int, start uint64, grace time.Duration) bool {
	if !sameProcess(pid, start) {
		return true
	}
	signalGroup(pid, start, unix.SIGTERM)
	if waitGone(pid, start, grace) {
		return true
	}
	signalGroup(pid, start, unix.SIGKILL)
	return waitGone(pid, start, 5*time.Second)
}
