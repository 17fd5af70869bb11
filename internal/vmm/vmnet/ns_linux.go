package vmnet

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// threadNS is the network namespace file of the calling thread.
const threadNS = "/proc/thread-self/ns/net"

// nsHandles are the two namespaces a Net switches between: the machine's
// and the one the agent ran in when the Net was made.
type nsHandles struct {
	machine int // fd of the machine's namespace
	agent   int // fd of the agent's namespace
}

// inNewNS runs f on a locked OS thread in a new network namespace, then
// returns the thread to the namespace it came from. It returns fds of
// both namespaces (the caller closes them), or an error with none open.
func inNewNS(f func() error) (nsHandles, error) {
	type result struct {
		h   nsHandles
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		h := nsHandles{machine: -1}
		var err error
		if h.agent, err = unix.Open(threadNS, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open the agent's network namespace: %w", err)}
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			unix.Close(h.agent)
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("create a network namespace: %w", err)}
			return
		}
		if h.machine, err = unix.Open(threadNS, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			err = fmt.Errorf("open the new network namespace: %w", err)
		} else {
			err = f()
		}
		if back := unix.Setns(h.agent, unix.CLONE_NEWNET); back != nil {
			// The thread stays locked, so it ends with this goroutine
			// instead of running other goroutines in the wrong namespace.
			h.close()
			done <- result{err: errors.Join(err, fmt.Errorf("return to the agent's network namespace: %w", back))}
			return
		}
		runtime.UnlockOSThread()
		if err != nil {
			h.close()
		}
		done <- result{h, err}
	}()
	r := <-done
	return r.h, r.err
}

// in runs f on a locked OS thread inside the machine's namespace, then
// returns the thread to the agent's. A thread that cannot return stays
// locked and ends with its goroutine.
func (h nsHandles) in(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(h.machine, unix.CLONE_NEWNET); err != nil {
			// Setns failed: the thread is where it was.
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the machine's network namespace: %w", err)
			return
		}
		err := f()
		if back := unix.Setns(h.agent, unix.CLONE_NEWNET); back != nil {
			done <- errors.Join(err, fmt.Errorf("return to the agent's network namespace: %w", back))
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func (h nsHandles) close() {
	if h.machine >= 0 {
		unix.Close(h.machine)
	}
	if h.agent >= 0 {
		unix.Close(h.agent)
	}
}

// sysctl writes one value under /proc/sys/net; it must run inside the
// namespace (the file is resolved against the opening thread's). A
// missing file (a kernel without IPv6) is skipped when optional.
func sysctl(path, value string, optional bool) error {
	err := os.WriteFile("/proc/sys/net/"+path, []byte(value), 0)
	if optional && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sysctl net/%s: %w", path, err)
	}
	return nil
}
