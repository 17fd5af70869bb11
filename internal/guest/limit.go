package guest

import (
	"net"
	"sync"
)

// Connection caps of the daemon. The host is its only client on the API
// listener and guest processes on the gateway listener; either may flood.
const (
	// maxConns bounds the API connections served at once (256): a host
	// holds at most 32 tunnels, one event stream and the commands and file
	// requests in flight. Past it, Accept waits until one closes.
	maxConns = 256
	// maxGatewayConns bounds the gateway listener's connections open at
	// once, waiting for a tunnel or tunneled (64: twice the host's 32
	// tunnels per machine). Past it a new connection is closed at once.
	maxGatewayConns = 64
)

// limitListener serves at most cap(sem) connections at once: Accept waits
// for a free place.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its listener's place back when closed.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// NetConn is the connection accepted (halfClose looks through it).
func (c *limitConn) NetConn() net.Conn { return c.Conn }
