package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
)

// ServeStreams serves the API over successive byte streams (a virtio-serial
// port, one end of a socket pair), each carrying one yamux server session.
// open returns the next stream; when a session dies (the host side went away
// or reconnected) the stream is closed and open is called again. It returns
// when ctx is done.
func (s *Server) ServeStreams(ctx context.Context, open func(ctx context.Context) (io.ReadWriteCloser, error)) error {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := s.serveOneStream(ctx, open)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > 2*time.Second {
			backoff = 50 * time.Millisecond
		}
		s.log.Info("stream session ended, reopening", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
	return nil
}

func (s *Server) serveOneStream(ctx context.Context, open func(ctx context.Context) (io.ReadWriteCloser, error)) error {
	rwc, err := open(ctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	defer rwc.Close()
	sess, err := yamux.Server(rwc, guestapi.YamuxConfig(s.log))
	if err != nil {
		return fmt.Errorf("yamux server: %w", err)
	}
	defer sess.Close()
	return s.Serve(ctx, sess)
}

// OpenVport returns an opener for the virtio-serial port called name (as
// found in /sys/class/virtio-ports/*/name), or for a device path if name
// starts with "/". The opener waits until the host side is connected.
func OpenVport(name string) func(ctx context.Context) (io.ReadWriteCloser, error) {
	return func(ctx context.Context) (io.ReadWriteCloser, error) {
		dev := name
		if !strings.HasPrefix(name, "/") {
			var err error
			if dev, err = findVport(name); err != nil {
				return nil, err
			}
		}
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open virtio port %s: %w", dev, err)
		}
		if err := waitHostConnected(ctx, f); err != nil {
			_ = f.Close()
			return nil, err
		}
		return f, nil
	}
}

func findVport(name string) (string, error) {
	const class = "/sys/class/virtio-ports"
	entries, err := os.ReadDir(class)
	if err != nil {
		return "", fmt.Errorf("find virtio port %q: %w", name, err)
	}
	for _, e := range entries {
		if readTrim(filepath.Join(class, e.Name(), "name")) == name {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("find virtio port %q: no /sys/class/virtio-ports/*/name matches", name)
}

// waitHostConnected polls until the port stops reporting POLLHUP (virtio
// console reports it while no host side is attached; reads then return EOF).
func waitHostConnected(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil // not pollable: just try
	}
	for {
		var revents int16
		var perr error
		cerr := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, perr = unix.Poll(fds, 0)
			revents = fds[0].Revents
		})
		if cerr != nil || (perr != nil && !errors.Is(perr, unix.EINTR)) {
			return nil
		}
		if revents&unix.POLLHUP == 0 {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
