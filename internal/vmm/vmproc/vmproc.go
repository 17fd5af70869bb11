package vmproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stat returns the state letter (field 3) and start time (field 22) of
// /proc/<pid>/stat.
func stat(pid int) (state string, start uint64, err error) {
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

// StartTime is field 22 of /proc/<pid>/stat (clock ticks since boot): with
// the pid it names one process uniquely.
func StartTime(pid int) (uint64, error) {
	_, st, err := stat(pid)
	return st, err
}

// Alive reports whether pid is still the living (not zombie) process that
// started at start.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	state, st, err := stat(pid)
	return err == nil && st == start && state != "Z" && state != "X"
}

// ReadPIDFile reads a pid written by a VMM (-pidfile).
func ReadPIDFile(path string) (int, error) {
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

// WatchExit closes done when the process exits. It uses a pidfd, so it
// works for processes that are not our children.
func WatchExit(pid int, start uint64, done chan<- struct{}) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil || !Alive(pid, start) {
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

// Signal sends sig to pid if it still is the process started at start;
// with group, also to its process group unless that group is ours.
func Signal(pid int, start uint64, sig unix.Signal, group bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if !Alive(pid, start) { // the pidfd now pins this exact process
		return
	}
	_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	if !group {
		return
	}
	if pgid, err := unix.Getpgid(pid); err == nil && pgid > 1 && pgid != unix.Getpgrp() {
		_ = unix.Kill(-pgid, sig)
	}
}

// WaitGone waits until the process is gone or d passes, and reports
// whether it is gone.
func WaitGone(pid int, start uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for Alive(pid, start) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Stop sends SIGTERM (to the process group too, with group), waits up to
// grace, then SIGKILL; it reports whether the process is gone.
func Stop(pid int, start uint64, grace time.Duration, group bool) bool {
	if !Alive(pid, start) {
		return true
	}
	Signal(pid, start, unix.SIGTERM, group)
	if WaitGone(pid, start, grace) {
		return true
	}
	Signal(pid, start, unix.SIGKILL, group)
	return WaitGone(pid, start, 5*time.Second)
}
