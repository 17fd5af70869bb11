package process

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/vmm"
)

// procStat returns the state (field 3) and start time (field 22) of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: fields restart after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22 overall
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat start time: %w", pid, err)
	}
	return f[0][0], start, nil
}

func startTime(pid int) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// alive reports whether pid runs and is the process that started at start
// (unknown start times never match: a reused pid must not be killed).
func alive(pid int, start uint64) bool {
	if pid <= 0 || start == 0 {
		return false
	}
	state, st, err := procStat(pid)
	return err == nil && state != 'Z' && state != 'X' && st == start
}

// killMachine kills, until none remain, the daemon's process group (if the
// daemon is still the recorded process) and every process carrying the
// machine's marker in its environment (commands, their orphans, terminals).
func killMachine(info vmm.Info) {
	marker := machineMarker(info)
	for range 50 {
		n := 0
		if alive(info.PID, info.StartTime) {
			_ = syscall.Kill(-info.PID, syscall.SIGKILL)
			_ = syscall.Kill(info.PID, syscall.SIGKILL)
			n++
		}
		for _, pid := range markedProcesses(marker) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		if n == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond) // let the kernel deliver before rescanning
	}
}

func markedProcesses(marker []byte) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !(bytes.Contains(env, marker) && hasEntry(env, marker)) {
			continue
		}
		if state, _, err := procStat(pid); err != nil || state == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// hasEntry reports whether env (NUL-separated) has marker as a whole entry.
func hasEntry(env, marker []byte) bool {
	return bytes.HasPrefix(env, marker) || bytes.Contains(env, append([]byte{0}, marker...))
}

// stopped reports whether pid is stopped, gone, or cannot run user code
// again before it stops: uninterruptible sleep ('D', e.g. a vfork parent
// waiting for a child that was stopped before its exec) with SIGSTOP
// pending stops on its way back to user space.
func stopped(pid int) bool {
	state, _, err := procStat(pid)
	if err != nil {
		return true
	}
	switch state {
	case 'T', 't', 'Z', 'X':
		return true
	case 'D':
		return stopPending(pid)
	}
	return false
}

// stopPending reports whether SIGSTOP is pending for pid (thread or process).
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	const bit = uint64(1) << (uint(syscall.SIGSTOP) - 1)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&bit != 0 {
			return true
		}
	}
	return false
}

// signalMachine sends sig to the daemon's process group (if the daemon is
// still the recorded process) and to every process carrying the machine's
// marker. It returns the pids it signalled.
func signalMachine(info vmm.Info, sig syscall.Signal) []int {
	var pids []int
	if alive(info.PID, info.StartTime) {
		_ = syscall.Kill(-info.PID, sig)
		if syscall.Kill(info.PID, sig) == nil {
			pids = append(pids, info.PID)
		}
	}
	for _, pid := range markedProcesses(machineMarker(info)) {
		if syscall.Kill(pid, sig) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func machineMarker(info vmm.Info) []byte {
	return []byte(markerEnv + "=" + info.Dir + "\x00")
}

// stopMachine stops every process of the machine (SIGSTOP), rescanning
// until all are stopped, so a process forked meanwhile is caught too.
func stopMachine(ctx context.Context, info vmm.Info) error {
	for {
		running := 0
		for _, pid := range signalMachine(info, syscall.SIGSTOP) {
			if !stopped(pid) {
				running++
			}
		}
		if running == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop processes: %d still running: %w", running, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
