package qemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/guestinit/initproto"
	"github.com/engrams/engrams/internal/vmm"
)

// sendControl connects to the control port socket, sends c and waits for
// the matching reply. Init reads the port only once it runs, so this also
// waits for the guest to come up. An attempt that hears nothing is retried
// on a fresh connection (see connectGuest), with the clock read anew;
// applying the same message twice is harmless. It retries until ctx is done.
func sendControl(ctx context.Context, sock string, c initproto.Control) (initproto.Reply, error) {
	var last error
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptLimit(attempt))
		c.TimeUnixNano = time.Now().UnixNano()
		rep, err := sendControlOnce(actx, sock, c)
		cancel()
		if err == nil {
			if !rep.OK {
				return rep, fmt.Errorf("guest control: %s", rep.Error)
			}
			return rep, nil
		}
		if errors.Is(err, initproto.ErrReplyBound) { // a hostile guest: no retry
			return rep, fmt.Errorf("guest control: %w", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("guest control: %w (last: %v)", vmm.ErrGuestTimeout, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func sendControlOnce(ctx context.Context, sock string, c initproto.Control) (initproto.Reply, error) {
	var rep initproto.Reply
	conn, err := dialUnix(ctx, sock)
	if err != nil {
		return rep, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	b, err := json.Marshal(c)
	if err != nil {
		return rep, err
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return rep, err
	}
	return initproto.ReadReply(bufio.NewReader(conn), c.ID)
}

// newControl builds a control message with the host's clock and fresh entropy.
func newControl(id uint64, hostname string, env map[string]string) initproto.Control {
	ent := make([]byte, 64)
	_, _ = rand.Read(ent)
	return initproto.Control{
		ID: id, Hostname: hostname, Env: env,
		TimeUnixNano: time.Now().UnixNano(), Entropy: ent,
	}
}

// connectGuest opens a session on the guest channel socket (the guestapi
// preamble, then yamux) and checks the daemon answers Ready. An attempt
// that hears nothing is abandoned for a fresh connection: QEMU can stop
// passing a connection's bytes to the guest once the guest's session on
// the port broke mid-stream (seen right after a restore or a resume), and
// a new connection always flows. Attempts get longer, for a guest slowed
// by software emulation. It retries until ctx is done.
func connectGuest(ctx context.Context, sock string) (*guestapi.Mux, guestapi.Ready, error) {
	var last error
	for attempt := 0; ; attempt++ {
		mux, ready, err := connectGuestOnce(ctx, sock, attemptLimit(attempt))
		if err == nil {
			return mux, ready, nil
		}
		if last == nil || ctx.Err() == nil { // keep what failed before time ran out
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, ready, fmt.Errorf("connect guest daemon: %w after %d attempts (last: %v)", vmm.ErrGuestTimeout, attempt+1, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// connectDaemon is connectGuest to the daemon with pid (any daemon if 0):
// a session answered by another one is closed and tried again.
func connectDaemon(ctx context.Context, sock string, pid int) (*guestapi.Mux, error) {
	for {
		mux, ready, err := connectGuest(ctx, sock)
		if err != nil || pid == 0 || ready.PID == pid {
			return mux, err
		}
		mux.Close()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect guest daemon %d: %w (daemon %d answers)", pid, vmm.ErrGuestTimeout, ready.PID)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// randomID is a machine handle's first control message id: ids stay
// unique across restores of one snapshot (see initproto.Control.ID).
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 2
}

// Bounds of one connection attempt: the first, and the longest.
const (
	firstAttempt = 100 * time.Millisecond
	readyAttempt = 3 * time.Second
)

// attemptLimit bounds attempt n (from 0): doubling from firstAttempt up
// to readyAttempt.
func attemptLimit(n int) time.Duration {
	d := firstAttempt
	for ; n > 0 && d < readyAttempt; n-- {
		d *= 2
	}
	return min(d, readyAttempt)
}

func connectGuestOnce(ctx context.Context, sock string, limit time.Duration) (*guestapi.Mux, guestapi.Ready, error) {
	var ready guestapi.Ready
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn, err := dialUnix(ctx, sock)
	if err != nil {
		return nil, ready, err
	}
	mux, err := guestapi.NewMux(ctx, conn)
	if err != nil {
		return nil, ready, err
	}
	cl := guestapi.NewClient(mux.Dial)
	defer cl.Close()
	if ready, err = cl.Ready(ctx); err != nil {
		mux.Close()
		return nil, ready, err
	}
	return mux, ready, nil
}

var errClosed = errors.New("machine destroyed")

// dialer keeps one guest session and reopens it when it dies.
func (m *machine) guestMux(ctx context.Context) (*guestapi.Mux, error) {
	m.mu.Lock()
	mux := m.mux
	m.mu.Unlock()
	if mux != nil {
		select {
		case <-mux.Done():
		default:
			return mux, nil
		}
	}
	m.connMu.Lock()
	defer m.connMu.Unlock()
	m.mu.Lock()
	if m.destroyed {
		m.mu.Unlock()
		return nil, errClosed
	}
	if m.paused { // fail at once: a connection made now would wedge the channel until Resume
		m.mu.Unlock()
		return nil, vmm.ErrPaused
	}
	if m.mux != nil && m.mux != mux {
		mux = m.mux
		m.mu.Unlock()
		return mux, nil
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.b.cfg.ReadyTimeout)
	defer cancel()
	t0 := time.Now()
	nm, _, err := connectGuest(ctx, m.guestSocket())
	m.b.log.Debug("guest session connect", "session_id", m.info.SessionID, "ms", time.Since(t0).Milliseconds(), "err", err)
	if err != nil {
		return nil, err
	}
	m.setMux(nm)
	return nm, nil
}

// muxCheckAfter is how long a session may go unverified before Dial checks it.
const muxCheckAfter = 2 * time.Second

func (m *machine) stale() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.verified) > muxCheckAfter
}

func (m *machine) markVerified() {
	m.mu.Lock()
	m.verified = time.Now()
	m.mu.Unlock()
}

// dropMux closes mux if it is still the machine's session.
func (m *machine) dropMux(mux *guestapi.Mux) {
	m.mu.Lock()
	if m.mux == mux {
		m.mux = nil
	}
	m.mu.Unlock()
	mux.Close()
}

// checkMux asks the guest daemon for Ready over mux, bounded like a first
// connection's probe.
func checkMux(ctx context.Context, mux *guestapi.Mux) error {
	ctx, cancel := context.WithTimeout(ctx, readyAttempt)
	defer cancel()
	cl := guestapi.NewClient(mux.Dial)
	defer cl.Close()
	_, err := cl.Ready(ctx)
	return err
}

func (m *machine) setMux(nm *guestapi.Mux) {
	m.mu.Lock()
	old := m.mux
	m.mux = nm
	if nm != nil {
		m.verified = time.Now() // connectGuest saw it answer Ready
	}
	m.mu.Unlock()
	if old != nil && old != nm {
		old.Close()
	}
}

// Dial opens a new stream to the guest daemon. A session not heard from
// for a while is checked first: after a pause the two ends of the single
// virtio-serial stream can disagree about which yamux session is current
// (the guest restarted its own while the host kept its), and requests
// would hang until keepalives give up. A check that fails drops the session
// and reconnects, which resets both ends.
func (m *machine) Dial(ctx context.Context) (net.Conn, error) {
	mux, err := m.guestMux(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial guest %s: %w", m.info.SessionID, err)
	}
	if m.stale() {
		if err := checkMux(ctx, mux); err != nil {
			m.b.log.Warn("guest channel not answering; reconnecting", "session_id", m.info.SessionID, "err", err)
			m.dropMux(mux)
			if mux, err = m.guestMux(ctx); err != nil {
				return nil, fmt.Errorf("dial guest %s: %w", m.info.SessionID, err)
			}
		}
		m.markVerified()
	}
	c, err := mux.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial guest %s: %w", m.info.SessionID, err)
	}
	return c, nil
}

func (m *machine) guestSocket() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st.Socket
}

// rebindGuestChannel points the guest port's chardev at a fresh socket
// (QMP chardev-change). A chardev socket serves one client at a time; this
// evicts a client that an older handle of this machine may still hold.
func (m *machine) rebindGuestChannel(ctx context.Context) error {
	next := fileGuest2
	if filepath.Base(m.guestSocket()) == fileGuest2 {
		next = fileGuest
	}
	p := m.path(next)
	if len(p) >= 108 {
		return fmt.Errorf("rebind guest channel: path %s too long for a unix socket", p)
	}
	_ = os.Remove(p)
	args := map[string]any{"id": "guest", "backend": map[string]any{
		"type": "socket",
		"data": map[string]any{
			"addr":   map[string]any{"type": "unix", "data": map[string]any{"path": p}},
			"server": true, "wait": false,
		},
	}}
	err := m.withQMP(ctx, func(q *QMP) error { return q.Execute(ctx, "chardev-change", args, nil) })
	if err != nil {
		return fmt.Errorf("rebind guest channel: %w", err)
	}
	old := m.guestSocket()
	m.mu.Lock()
	m.st.Socket = p
	m.info.Socket = p
	m.mu.Unlock()
	_ = os.Remove(old)
	return m.writeState()
}
