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
	sess    *yamux.Session
	refused chan struct{} // closed when refuseStreams returns
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
	m := &Mux{sess: sess, refused: make(chan struct{})}
	go m.refuseStreams()
	return m, nil
}

// refuseStreams ends the session at the first stream the guest opens: in
// the guest API the host opens every stream, and each stream the guest
// opened and nobody read would hold up to a stream window of its bytes
// (yamux keeps up to 256 waiting). It returns when the session ends.
func (m *Mux) refuseStreams() {
	defer close(m.refused)
	s, err := m.sess.AcceptStream()
	if err != nil {
		return
	}
	_ = s.Close()
	_ = m.sess.Close()
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
func (m *Mux) Close() error {
	err := m.sess.Close()
	<-m.refused
	return err
}
