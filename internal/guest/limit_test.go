package guest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener hands out one end of a new pipe per Accept and counts them.
type pipeListener struct {
	mu       sync.Mutex
	accepted int
	peers    chan net.Conn
	done     chan struct{}
	once     sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	a, b := net.Pipe()
	l.mu.Lock()
	l.accepted++
	l.mu.Unlock()
	select {
	case l.peers <- b:
		return a, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }
func (l *pipeListener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

// TestLimitListener: at most n connections are accepted at once; closing
// one (twice does no harm) makes room for exactly one more, and Close ends
// a waiting Accept.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testLimitListener)
}

func testLimitListener(t *testing.T) {
	inner := &pipeListener{peers: make(chan net.Conn, 10), done: make(chan struct{})}
	l := newLimitListener(inner, 3)
	var conns []net.Conn
	for range 3 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	next := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(next)
				return
			}
			next <- c
		}
	}()
	synctest.Wait()
	select {
	case <-next:
		t.Fatal("a fourth connection was accepted while three are open")
	default:
	}
	_ = conns[0].Close()
	_ = conns[0].Close()
	if c := <-next; c == nil {
		t.Fatal("no connection accepted after one closed")
	}
	if n := inner.count(); n != 4 {
		t.Fatalf("%d connections accepted, want 4", n)
	}
	_ = l.Close()
	if _, ok := <-next; ok {
		t.Fatal("Accept went on after Close")
	}
}

// The caps the daemon promises, written out so a change to them shows here.
const (
	wantGatewayConns = 64
	wantConns        = 256
)

// TestGatewayCapsConnections: past 64 open connections, a
// new gateway connection is closed at once; the ones before keep waiting
// for a tunnel, and once they are gone (here: reaped after their wait)
// new ones are taken again.
func TestGatewayCapsConnections(t *testing.T) {
	t.Parallel()
	d := startDaemonWith(t, gatewayConfig(t), true, func(s *Server) { s.gw.wait = 2 * time.Second })
	gw := strings.TrimPrefix(waitGateway(t, d), "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", gw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	open := func() int {
		d.srv.gw.mu.Lock()
		defer d.srv.gw.mu.Unlock()
		return d.srv.gw.open
	}
	var kept []net.Conn
	for range wantGatewayConns {
		kept = append(kept, dial())
	}
	waitFor(t, "the gateway to take every connection", func() bool { return open() == wantGatewayConns })
	over := dial()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection %d past the cap of %d: read %v, want it closed", wantGatewayConns+1, wantGatewayConns, err)
	}
	_ = kept[0].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := kept[0].Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection within the cap: read %v, want it still waiting", err)
	}
	waitFor(t, "the waiting connections to be reaped", func() bool { return open() == 0 })
	_ = dial()
	waitFor(t, "a new connection to be taken", func() bool { return open() == 1 })
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestServeCapsConnections: the daemon serves at most 256 connections
// at once: past them it accepts no more until one closes.
func TestServeCapsConnections(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testServeCapsConnections)
}

func testServeCapsConnections(t *testing.T) {
	srv := New(Config{WorkDir: t.TempDir(), StateDir: t.TempDir(), HarnessDir: t.TempDir()}, Deps{})
	inner := &pipeListener{peers: make(chan net.Conn), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, inner) }()
	var peers []net.Conn
	collect := func(n int) {
		for len(peers) < n {
			select {
			case c := <-inner.peers:
				peers = append(peers, c)
			case <-time.After(10 * time.Second):
				t.Fatalf("the daemon accepted %d connections, want %d", len(peers), n)
			}
		}
	}
	collect(wantConns)
	synctest.Wait()
	select {
	case c := <-inner.peers:
		_ = c.Close()
		t.Fatalf("the daemon accepted connection %d, past its cap of %d", wantConns+1, wantConns)
	default:
	}
	_ = peers[0].Close() // the daemon sees it end and makes room for one more
	collect(wantConns + 1)
	cancel()
	for _, c := range peers {
		_ = c.Close()
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
