package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/engrams/engrams/internal/guestapi"
)

// DefaultGatewayAddr is the model gateway listener's default address.
const DefaultGatewayAddr = "127.0.0.1:4780"

// gatewayWait: a gateway client connection that finds no tunnel within
// this long is closed.
const gatewayWait = 10 * time.Second

// errGatewayClosed: the gateway listener stopped (or never started).
var errGatewayClosed = errors.New("the model gateway is not running")

// gateway is the guest end of the model gateway: a loopback listener whose
// every connection is handed, raw, to the oldest tunnel request the host
// has waiting (guestapi.PathTunnel); the host forwards it to the
// coordinator, which alone holds the real credentials.
type gateway struct {
	log  *slog.Logger
	wait time.Duration

	mu      sync.Mutex
	ln      net.Listener
	addr    string
	lnErr   error
	closed  bool
	done    chan struct{} // closed when the gateway stops
	tunnels []*tunnelWaiter
	conns   []pendingConn
	open    int  // connections accepted and not closed (maxGatewayConns at most)
	full    bool // refusing connections (logged once per episode)
}

type tunnelWaiter struct{ ch chan net.Conn } // buffered: a send never blocks

type pendingConn struct {
	c     net.Conn
	since time.Time
}

func newGateway(log *slog.Logger) *gateway {
	return &gateway{log: log, wait: gatewayWait, done: make(chan struct{})}
}

// Listen opens the listener on addr, which must be a loopback address.
func (g *gateway) Listen(addr string) error {
	ln, err := listenLoopback(addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.lnErr, g.closed = err, true
		close(g.done)
		return err
	}
	g.ln, g.addr = ln, ln.Addr().String()
	return nil
}

func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gateway address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("gateway address %q: not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway listen: %w", err)
	}
	return ln, nil
}

// URL is the gateway's base URL ("" before it listens); the error says why
// it cannot listen.
func (g *gateway) URL() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lnErr != nil {
		return "", fmt.Errorf("model gateway: %w", g.lnErr)
	}
	if g.addr == "" {
		return "", nil
	}
	return "http://" + g.addr, nil
}

// Serve accepts connections until ctx is done, then closes the listener,
// the connections still waiting, and turns tunnel requests away.
func (g *gateway) Serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = g.ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	rctx, rcancel := context.WithCancel(ctx)
	wg.Go(func() { g.reap(rctx) })
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			g.log.Warn("gateway accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if c, ok := g.admit(c); ok {
			g.offer(c)
		}
	}
	rcancel()
	wg.Wait()
	g.mu.Lock()
	g.closed = true
	close(g.done)
	conns := g.conns
	g.conns = nil
	g.mu.Unlock()
	for _, pc := range conns {
		_ = pc.c.Close()
	}
}

// reap closes connections that waited longer than g.wait for a tunnel.
func (g *gateway) reap(ctx context.Context) {
	t := time.NewTicker(max(g.wait/10, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.mu.Lock()
			var old []pendingConn
			for len(g.conns) > 0 && now.Sub(g.conns[0].since) >= g.wait {
				old = append(old, g.conns[0])
				g.conns = g.conns[1:]
			}
			g.mu.Unlock()
			for _, pc := range old {
				g.log.Warn("gateway connection found no tunnel; closed", "waited", g.wait)
				_ = pc.c.Close()
			}
		}
	}
}

// admit counts c among the open connections, or closes it when
// maxGatewayConns are open already.
func (g *gateway) admit(c net.Conn) (net.Conn, bool) {
	g.mu.Lock()
	if g.open >= maxGatewayConns {
		first := !g.full
		g.full = true
		g.mu.Unlock()
		if first {
			g.log.Warn("gateway connections refused: too many open", "max", maxGatewayConns)
		}
		_ = c.Close()
		return nil, false
	}
	g.open++
	g.full = false
	g.mu.Unlock()
	return &limitConn{Conn: c, release: sync.OnceFunc(func() {
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
	})}, true
}

// offer hands c to the oldest waiting tunnel, or queues it.
func (g *gateway) offer(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = c.Close()
		return
	}
	if len(g.tunnels) > 0 {
		w := g.tunnels[0]
		g.tunnels = g.tunnels[1:]
		w.ch <- c
		return
	}
	g.conns = append(g.conns, pendingConn{c: c, since: time.Now()})
}

// await returns the next gateway connection for a tunnel, waiting until
// one comes, ctx is done or the gateway stops.
func (g *gateway) await(ctx context.Context) (net.Conn, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errGatewayClosed
	}
	if len(g.conns) > 0 {
		pc := g.conns[0]
		g.conns = g.conns[1:]
		g.mu.Unlock()
		return pc.c, nil
	}
	w := &tunnelWaiter{ch: make(chan net.Conn, 1)}
	g.tunnels = append(g.tunnels, w)
	g.mu.Unlock()
	err := errGatewayClosed
	select {
	case c := <-w.ch:
		return c, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-g.done:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.tunnels {
		if x == w {
			g.tunnels = append(g.tunnels[:i], g.tunnels[i+1:]...)
			return nil, err
		}
	}
	c := <-w.ch // handed a connection as this request left: give it back
	if g.closed {
		_ = c.Close()
	} else {
		g.conns = append([]pendingConn{{c: c, since: time.Now()}}, g.conns...)
	}
	return nil, err
}

// handleTunnel pairs the request with a gateway connection (see
// guestapi.PathTunnel).
func (s *Server) handleTunnel(w http.ResponseWriter, r *http.Request) {
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), guestapi.TunnelUpgrade) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s wants Connection: Upgrade and Upgrade: %s", guestapi.PathTunnel, guestapi.TunnelUpgrade))
		return
	}
	c, err := s.gw.await(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "no tunnel: "+err.Error())
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = c.Close()
		writeError(w, http.StatusInternalServerError, "tunnel: "+err.Error())
		return
	}
	_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + guestapi.TunnelUpgrade +
		"\r\n" + guestapi.HeaderVersion + ": " + strconv.Itoa(guestapi.Version) + "\r\n\r\n")
	if err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_, _ = conn.Close(), c.Close()
		return
	}
	var early []byte
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ = brw.Reader.Peek(n)
	}
	splice(r.Context(), conn, early, c)
}

// headerHas reports whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// splice copies bytes both ways between the tunnel and the gateway
// client (early: bytes the tunnel sent before the upgrade was answered).
// A side that ends half-closes the other where the connection allows,
// else both close; both close when ctx is done.
func splice(ctx context.Context, tunnel net.Conn, early []byte, client net.Conn) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { _, _ = tunnel.Close(), client.Close() }) }
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	pipe := func(dst io.Writer, src io.Reader, dstConn net.Conn) {
		_, err := io.Copy(dst, src)
		if err != nil || !halfClose(dstConn) {
			closeBoth()
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { pipe(client, io.MultiReader(bytesReader(early), tunnel), client) })
	wg.Go(func() { pipe(tunnel, client, tunnel) })
	wg.Wait()
	closeBoth()
}

func bytesReader(b []byte) io.Reader { return strings.NewReader(string(b)) }

// halfClose ends c's writing side only: TCP and Unix connections have
// CloseWrite; a yamux stream's Close sends FIN and keeps reading.
func halfClose(c net.Conn) bool {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = u.NetConn()
	}
	switch c := c.(type) {
	case interface{ CloseWrite() error }:
		return c.CloseWrite() == nil
	case *yamux.Stream:
		return c.Close() == nil
	}
	return false
}
