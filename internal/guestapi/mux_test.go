package guestapi_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
)

// socketPair returns two connected stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// TestMuxReconnect serves the daemon over successive single streams (as on
// a virtio-serial port) and checks that a host reconnecting with a new
// session on a fresh stream is served again.
func TestMuxReconnect(t *testing.T) {
	t.Parallel()
	guestEnds := make(chan net.Conn)
	srv := guest.New(guest.Config{WorkDir: t.TempDir(), Env: []string{"PATH=" + os.Getenv("PATH")}}, guest.Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		err := srv.ServeStreams(ctx, func(ctx context.Context) (io.ReadWriteCloser, error) {
			select {
			case c := <-guestEnds:
				return c, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		if err != nil {
			t.Errorf("ServeStreams: %v", err)
		}
	})
	defer wg.Wait()
	defer cancel()

	for round := range 3 {
		host, guestEnd := socketPair(t)
		select {
		case guestEnds <- guestEnd:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: daemon did not reopen its stream", round)
		}
		mux, err := guestapi.NewMux(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		c := guestapi.NewClient(mux.Dial)
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		if _, err := c.Ready(rctx); err != nil {
			t.Fatalf("round %d: ready: %v", round, err)
		}
		var out lockedBuffer
		exit, err := c.Exec(rctx, guestapi.ExecStart{Argv: []string{"echo", "over yamux"}}, nil, &out, nil)
		if err != nil || exit.ExitCode != 0 || out.String() != "over yamux\n" {
			t.Fatalf("round %d: exec = %+v %q, %v", round, exit, out.String(), err)
		}
		// Several concurrent streams share the session.
		var cwg sync.WaitGroup
		for range 4 {
			cwg.Go(func() {
				if _, err := c.Ready(rctx); err != nil {
					t.Errorf("round %d: concurrent ready: %v", round, err)
				}
			})
		}
		cwg.Wait()
		rcancel()
		c.Close()
		// The host goes away (as when a host agent restarts): the daemon's
		// session dies and it opens the next stream.
		if err := mux.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-mux.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("mux not done after Close")
		}
		if _, err := mux.Dial(ctx); err == nil {
			t.Error("Dial on a closed mux succeeded")
		}
	}
}

func TestMuxDialHonoursContext(t *testing.T) {
	t.Parallel()
	a, b := socketPair(t)
	defer b.Close()
	go func() { _, _ = guestapi.AwaitHello(b) }()
	mux, err := guestapi.NewMux(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mux.Dial(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with a cancelled ctx = %v", err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// TestMuxAfterRestoreOnSameStream is what a restored VM looks like from
// the host: the guest's end of the port is the one it had at snapshot time,
// still inside the old session, while the host arrives on a new connection.
// The preamble must give the new host a working session at once.
func TestMuxAfterRestoreOnSameStream(t *testing.T) {
	t.Parallel()
	port, guestEnd := socketPair(t)
	srv := guest.New(guest.Config{WorkDir: t.TempDir(), Env: []string{"PATH=" + os.Getenv("PATH")}}, guest.Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		_ = srv.ServeStreams(ctx, func(ctx context.Context) (io.ReadWriteCloser, error) {
			return nopCloser{guestEnd}, nil // the same port every time, as a virtio-serial device
		})
	})
	defer guestEnd.Close()
	// The chardev: guest output goes to whichever host is connected now
	// (dropped while none is); each host's input goes to the port. The
	// guest never sees a host leave or arrive.
	var mu sync.Mutex
	var current net.Conn
	wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := port.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			if current != nil {
				_, _ = current.Write(buf[:n])
			}
			mu.Unlock()
		}
	})
	defer port.Close()
	for round := range 3 {
		host, chardev := socketPair(t)
		go func() { _, _ = io.Copy(port, chardev) }()
		mu.Lock()
		if current != nil {
			_ = current.Close() // the old host is gone, its session state with it
		}
		current = chardev
		mu.Unlock()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		mux, err := guestapi.NewMux(rctx, host)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		c := guestapi.NewClient(mux.Dial)
		if _, err := c.Ready(rctx); err != nil {
			t.Fatalf("round %d: ready: %v", round, err)
		}
		rcancel()
		defer mux.Close()
	}
}

type nopCloser struct{ net.Conn }

func (nopCloser) Close() error { return nil }
