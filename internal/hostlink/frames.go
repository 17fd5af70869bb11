package hostlink

import (
	"encoding/binary"
	"net"
)

// yamux frame header: version, type, flags (2), stream id (4), length (4).
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// frameConn joins each yamux data-frame header with the body yamux writes
// right after it, so a frame crosses the WebSocket as one message (one
// syscall, one WebSocket frame) instead of two. Only yamux's send loop
// writes to it, one write at a time.
type frameConn struct {
	net.Conn
	buf     []byte
	pending bool // buf holds a data header whose body comes next
}

func newFrameConn(c net.Conn) *frameConn { return &frameConn{Conn: c} }

func (c *frameConn) Write(p []byte) (int, error) {
	if c.pending {
		c.pending = false
		c.buf = append(c.buf[:yamuxHeaderSize], p...)
		if _, err := c.Conn.Write(c.buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
		c.buf = append(c.buf[:0], p...)
		c.pending = true
		return len(p), nil
	}
	return c.Conn.Write(p)
}
