package qemu

import (
	"context"
	"io"
	"os"
	"time"
)

// drainSerial copies the guest console from the serial socket into
// logPath, keeping at most about 2*max bytes (logPath plus logPath.1).
// QEMU drops console output while nothing is connected, so the guest never
// blocks on it. It returns when ctx is done or the socket closes for good.
func drainSerial(ctx context.Context, sock, logPath string, max int64) {
	var conn io.ReadCloser
	for {
		c, err := dialUnix(ctx, sock)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	w := &cappedLog{path: logPath, max: max}
	defer w.close()
	_, _ = io.Copy(w, conn)
}

// cappedLog is an append-only file rotated once it passes max bytes.
type cappedLog struct {
	path string
	max  int64
	f    *os.File
	n    int64
}

func (c *cappedLog) Write(b []byte) (int, error) {
	if c.f == nil || c.n >= c.max {
		c.close()
		if c.n >= c.max {
			_ = os.Rename(c.path, c.path+".1")
		}
		f, err := os.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return len(b), nil // logging must never stop the drain
		}
		st, _ := f.Stat()
		c.f, c.n = f, 0
		if st != nil {
			c.n = st.Size()
		}
	}
	n, _ := c.f.Write(b)
	c.n += int64(n)
	return len(b), nil
}

func (c *cappedLog) close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}
