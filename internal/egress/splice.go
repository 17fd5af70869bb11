package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// activity is when a proxied connection last moved a byte, either way.
type activity struct{ last atomic.Int64 }

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) idleFor() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

var errAborted = errors.New("connection ended by the other direction")

// idleConn is one side of a proxied connection with the proxy's
// timeouts: a read fails once neither direction moved a byte for idle
// (or at hard, when set: a head must arrive by then), a write once it
// made no progress for idle. abort makes a blocked read fail at once.
type idleConn struct {
	net.Conn
	idle    time.Duration
	act     *activity
	hard    time.Time // set and read only by the goroutine that reads
	aborted atomic.Bool
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		if c.aborted.Load() {
			return 0, errAborted
		}
		dl := c.hard
		if dl.IsZero() {
			dl = time.Now().Add(c.idle)
		}
		c.Conn.SetReadDeadline(dl)
		if c.aborted.Load() { // abort's deadline may have come before ours
			return 0, errAborted
		}
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.act.touch()
		}
		if n == 0 && c.hard.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) && !c.aborted.Load() && c.act.idleFor() < c.idle {
			continue // the other direction is busy
		}
		return n, err
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

// abort fails the current and every later read.
func (c *idleConn) abort() {
	c.aborted.Store(true)
	c.Conn.SetReadDeadline(time.Unix(1, 0))
}

// closeWrite half-closes c when its connection can (TCP), so the peer
// sees the end of what was sent and can finish its answer.
func (c *idleConn) closeWrite() {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw countWriter) Write(b []byte) (int, error) {
	n, err := cw.w.Write(b)
	cw.n.Add(int64(n))
	return n, err
}

const copyBufBytes = 32 << 10

var copyBufs = sync.Pool{New: func() any { return new([copyBufBytes]byte) }}

// copyRaw copies src to dst until src ends (nil) or either fails.
func copyRaw(dst io.Writer, src io.Reader) error {
	buf := copyBufs.Get().(*[copyBufBytes]byte)
	defer copyBufs.Put(buf)
	for {
		n, err := src.Read(buf[:])
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
