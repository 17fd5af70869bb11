package guestapi

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// YamuxConfig is the session configuration both ends of a multiplexed
// stream (virtio-serial) use. A nil logger discards yamux's log.
func YamuxConfig(log *slog.Logger) *yamux.Config {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.ConnectionWriteTimeout = 30 * time.Second
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	return cfg
}

// Mux is the host side of a single-stream transport (a virtio-serial port):
// a yamux client session whose streams each carry one HTTP connection to the
// guest daemon. Use Dial as a Client's dial function.
type Mux struct {
	sess *yamux.Session
}

// NewMux opens a session over conn (the preamble, then a yamux client
// session) and returns once the guest daemon took it, or ctx ends. Closing
// the Mux closes conn. After the guest daemon restarts its session (or
// conn breaks) the Mux is dead (Done closed): make a new one.
func NewMux(ctx context.Context, conn net.Conn) (*Mux, error) {
	conn, err := greet(ctx, conn)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(conn, YamuxConfig(nil))
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("start yamux session: %w", err)
	}
	return &Mux{sess: sess}, nil
}

// Dial opens a new stream to the guest daemon. Opening only queues a SYN
// frame, so it does not wait on the guest; ctx is checked first.
func (m *Mux) Dial(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := m.sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open guest stream: %w", err)
	}
	return c, nil
}

// Done is closed when the session ends.
func (m *Mux) Done() <-chan struct{} { return m.sess.CloseChan() }

// Close ends the session and closes the underlying stream.
func (m *Mux) Close() error { return m.sess.Close() }
