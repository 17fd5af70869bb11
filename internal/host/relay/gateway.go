package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
)

// The model gateway, host side: a guest process connecting to the guest
// daemon's gateway listener is handed to the host as the answer (101) to
// one of the GET PathTunnel requests the host keeps waiting; the host
// serves HTTP on that stream and forwards each request to the coordinator
// over the link (hostlink.PathGateway), which holds the real keys.

// Tunnel pool bounds.
const (
	tunnelPoolSize = 2 // GET /v1/tunnel requests waiting per machine
	// maxTunnels bounds a machine's tunnels, waiting and served (32): a
	// harness uses a few connections to its model at once; each served one
	// holds a connection's buffers and goroutines on the host. Connections
	// the guest opens past it wait in the guest daemon until one ends.
	maxTunnels      = 32
	tunnelRetryBase = 100 * time.Millisecond // first wait after a failed tunnel; doubles
	tunnelRetryMax  = 10 * time.Second
	tunnelOpenLimit = 30 * time.Second // dial + writing the request (not the wait for a connection)
)

// runTunnels keeps tunnelPoolSize requests waiting: each that the guest
// answers with a connection is replaced at once and served until the
// connection ends, up to maxTunnels at once (reaching it is reported).
// Failures (the machine paused or snapshotting, a guest without a
// gateway) wait with a growing delay, so a pool never spins.
func (rl *Relay) runTunnels(ctx context.Context, mc *machines.Machine) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	log := rl.log.With("session_id", mc.SessionID())
	slots := make(chan struct{}, tunnelPoolSize)
	tunnels := make(chan struct{}, maxTunnels) // waiting and served
	bo := &tunnelBackoff{}
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		case <-rl.stop:
			return
		case <-mc.VM().Done():
			return
		}
		if !rl.takeTunnel(ctx, mc, tunnels) {
			return
		}
		if d := bo.delay(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			case <-rl.stop:
				t.Stop()
				return
			case <-mc.VM().Done():
				t.Stop()
				return
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-tunnels }()
			rl.tunnelOnce(ctx, mc, slots, bo, log)
		}()
	}
}

// takeTunnel takes one of mc's maxTunnels, waiting for one to end when
// all are in use (reported); false when the pool ends first.
func (rl *Relay) takeTunnel(ctx context.Context, mc *machines.Machine, tunnels chan struct{}) bool {
	select {
	case tunnels <- struct{}{}:
		return true
	default:
	}
	rl.Exceeded(mc, Exceeded{Bound: BoundTunnels, Limit: maxTunnels, Got: maxTunnels,
		Message: fmt.Sprintf("the guest holds %d model gateway connections open, the most the host serves a machine at once: more wait in the guest until one ends", maxTunnels)})
	select {
	case tunnels <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-rl.stop:
	case <-mc.VM().Done():
	}
	return false
}

// tunnelOnce waits for one connection through a tunnel and serves it. It
// frees its pool slot as soon as the tunnel is answered (or failed).
func (rl *Relay) tunnelOnce(ctx context.Context, mc *machines.Machine, slots chan struct{}, bo *tunnelBackoff, log *slog.Logger) {
	release := sync.OnceFunc(func() { <-slots })
	defer release()
	conn, err := openTunnel(ctx, mc)
	var over *tunnelHeaderError
	if errors.As(err, &over) {
		rl.Exceeded(mc, Exceeded{Bound: BoundTunnelHeader, Limit: guestapi.MaxHeaderBytes, Got: guestapi.MaxHeaderBytes + 1,
			Message: fmt.Sprintf("the guest's answer to a tunnel request ran past %d KiB before its headers ended: the host closed that tunnel", guestapi.MaxHeaderBytes>>10)})
	}
	if err != nil {
		if ctx.Err() == nil {
			n := bo.fail()
			log.Debug("gateway tunnel failed; retrying", "err", err, "failures_in_a_row", n)
		}
		return
	}
	release()
	if rl.serveTunnel(ctx, mc, conn, log) > 0 {
		bo.reset()
	} else {
		bo.fail() // a connection that carried no request: do not loop on a guest that answers at once
	}
}

// openTunnel sends GET PathTunnel on a new stream to mc's guest and waits
// until the guest answers it; on 101 the stream is the connection.
func openTunnel(ctx context.Context, mc *machines.Machine) (net.Conn, error) {
	dialCtx, cancel := context.WithTimeout(ctx, tunnelOpenLimit)
	defer cancel()
	c, err := mc.VM().Dial(dialCtx)
	if err != nil {
		return nil, fmt.Errorf("dial guest: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() }) // ends the wait
	req, err := http.NewRequest(http.MethodGet, "http://guest"+guestapi.PathTunnel, nil)
	if err != nil {
		stop()
		_ = c.Close()
		return nil, fmt.Errorf("build tunnel request: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", guestapi.TunnelUpgrade)
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	_ = c.SetWriteDeadline(time.Now().Add(tunnelOpenLimit))
	err = req.Write(c)
	_ = c.SetWriteDeadline(time.Time{})
	var resp *http.Response
	var br *bufio.Reader
	if err == nil {
		resp, br, err = readTunnelAnswer(c, req)
	}
	if !stop() {
		_ = c.Close()
		return nil, fmt.Errorf("open tunnel: %w", ctx.Err())
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("tunnel request: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), guestapi.TunnelUpgrade) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		_ = c.Close()
		return nil, fmt.Errorf("tunnel request: guest answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return &bufferedConn{Conn: c, r: br}, nil
}

// readTunnelAnswer reads the guest's answer to a tunnel request from c: its
// status line and headers within guestapi.MaxHeaderBytes (past them a
// *tunnelHeaderError). On 101 the returned reader goes on reading c,
// unbounded: the tunnel's bytes.
func readTunnelAnswer(c io.Reader, req *http.Request) (*http.Response, *bufio.Reader, error) {
	lim := &headerLimit{r: c, n: guestapi.MaxHeaderBytes}
	br := bufio.NewReaderSize(lim, 4<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if lim.hit {
			return nil, nil, &tunnelHeaderError{err: err}
		}
		return nil, nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		lim.n = math.MaxInt64 // the headers ended: the rest is the tunnel
	}
	return resp, br, nil
}

// tunnelHeaderError: a tunnel answer's headers ran past their bound.
type tunnelHeaderError struct{ err error }

func (e *tunnelHeaderError) Error() string {
	return fmt.Sprintf("tunnel answer: headers over %d bytes: %v", guestapi.MaxHeaderBytes, e.err)
}

// headerLimit reads at most n bytes of r, then fails (and says so).
type headerLimit struct {
	r   io.Reader
	n   int64
	hit bool
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, errors.New("tunnel answer over its bound")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// bufferedConn is a conn whose first bytes may already sit in r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// RemoteAddr is never nil (http.Server logs it).
func (c *bufferedConn) RemoteAddr() net.Addr {
	if a := c.Conn.RemoteAddr(); a != nil {
		return a
	}
	return tunnelAddr{}
}

// tunnelBackoff is a pool's wait after consecutive failures.
type tunnelBackoff struct {
	mu sync.Mutex
	n  int
}

func (b *tunnelBackoff) fail() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	return b.n
}

func (b *tunnelBackoff) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n = 0
}

// delay is the wait before the next tunnel: none after a success, then
// doubling from tunnelRetryBase up to tunnelRetryMax, with jitter.
func (b *tunnelBackoff) delay() time.Duration {
	b.mu.Lock()
	n := b.n
	b.mu.Unlock()
	if n == 0 {
		return 0
	}
	d := tunnelRetryMax
	if n <= 10 {
		d = min(tunnelRetryBase<<(n-1), tunnelRetryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// errNoLink: the agent has no registered link to the coordinator.
var errNoLink = errors.New("no link to the coordinator")
