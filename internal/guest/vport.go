package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
)

// ServeStreams serves the API over a single byte stream (a virtio-serial
// port, one end of a socket pair) that carries one yamux session at a time.
// Each session opens with the guestapi preamble; when it ends (the host went
// away, or a new host greets) the next one is awaited on the same stream,
// which stays open: closing a virtio port can leave QEMU not reading the
// host's bytes until the host reconnects. open is called again only when
// the stream itself fails. It returns when ctx is done.
func (s *Server) ServeStreams(ctx context.Context, open func(ctx context.Context) (io.ReadWriteCloser, error)) error {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		rwc, err := open(ctx)
		if err == nil {
			err = s.serveStream(ctx, rwc)
			_ = rwc.Close()
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Info("stream failed, reopening", "err", err, "retry_in", backoff)
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

// hostWaiter is a stream whose reads end (EOF) while no host is attached,
// and which can wait for the next one (a virtio-serial port).
type hostWaiter interface {
	WaitHost(ctx context.Context) error
}

// serveStream serves successive sessions on rwc until it fails for good.
func (s *Server) serveStream(ctx context.Context, rwc io.ReadWriteCloser) error {
	stop := context.AfterFunc(ctx, func() { _ = rwc.Close() })
	defer stop()
	for {
		r, err := guestapi.AwaitHello(rwc)
		if hw, ok := rwc.(hostWaiter); ok && errors.Is(err, io.EOF) {
			s.log.Debug("no host attached to the stream; waiting")
			if err := hw.WaitHost(ctx); err != nil {
				return err
			}
			s.log.Debug("host attached")
			continue
		}
		if err != nil {
			return fmt.Errorf("open session: %w", err)
		}
		err = s.serveSession(ctx, rwc, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Info("session ended, awaiting the next", "err", err)
	}
}

// serveSession runs one yamux session whose input is r (the stream after
// the preamble) and output rwc. When it ends, its reads are cut off and
// joined, so that the next session's preamble is read by nobody else.
func (s *Server) serveSession(ctx context.Context, rwc io.ReadWriteCloser, r io.Reader) error {
	in := &sessionInput{r: r}
	defer in.detach(rwc)
	sess, err := yamux.Server(struct {
		io.Reader
		io.Writer
		io.Closer
	}{in, rwc, in}, guestapi.YamuxConfig(s.log))
	if err != nil {
		return fmt.Errorf("yamux server: %w", err)
	}
	defer sess.Close()
	return s.Serve(ctx, sess)
}

// sessionInput hands one session the stream's reads until detached.
type sessionInput struct {
	r        io.Reader
	mu       sync.Mutex
	detached bool
	reading  sync.WaitGroup
}

func (in *sessionInput) Read(p []byte) (int, error) {
	in.mu.Lock()
	if in.detached {
		in.mu.Unlock()
		return 0, io.EOF
	}
	in.reading.Add(1)
	in.mu.Unlock()
	defer in.reading.Done()
	return in.r.Read(p)
}

// Close is the session's: the stream stays open for the next session.
func (in *sessionInput) Close() error { return nil }

// detach ends the session's reads: a read blocked on the stream is
// interrupted with a past deadline (it returns no data), then the deadline
// is cleared. A stream without deadlines is closed instead.
func (in *sessionInput) detach(stream any) {
	in.mu.Lock()
	in.detached = true
	in.mu.Unlock()
	d, ok := stream.(interface{ SetReadDeadline(time.Time) error })
	if !ok || d.SetReadDeadline(time.Now()) != nil {
		if c, ok := stream.(io.Closer); ok {
			_ = c.Close()
		}
		in.reading.Wait()
		return
	}
	in.reading.Wait()
	_ = d.SetReadDeadline(time.Time{})
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
		return &port{File: f}, nil
	}
}

// port is an open virtio-serial port: reads end (EOF) while no host is
// attached; WaitHost waits for the next one.
type port struct{ *os.File }

func (p *port) WaitHost(ctx context.Context) error { return waitHostConnected(ctx, p.File) }

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
