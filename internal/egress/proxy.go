package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ProxyConfig bounds the proxy; zero fields take the defaults.
type ProxyConfig struct {
	MaxConns    int           // connections at once (256); more are closed at once
	PeekTimeout time.Duration // for a ClientHello or a request head to arrive (10 s)
	IdleTimeout time.Duration // a connection with no byte either way is closed (2 min)
	DialTimeout time.Duration // one dial through the Dialer (10 s)
	// PlaceholderPrefix starts the credential placeholders guests hold; a
	// plain HTTP request carrying one (in the clear or in a Basic
	// authorization) is refused and its connection closed: placeholders
	// are substituted only on their own hosts' brokered TLS. "": none.
	PlaceholderPrefix string
}

func (c ProxyConfig) withDefaults() ProxyConfig {
	if c.MaxConns <= 0 {
		c.MaxConns = 256
	}
	if c.PeekTimeout <= 0 {
		c.PeekTimeout = 10 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	return c
}

// ProxyDeps is what the proxy serves on and asks.
type ProxyDeps struct {
	Listener net.Listener
	Names    Names
	Dialer   Dialer
	// OriginalDst gives a transparent connection's port; nil: only
	// explicit proxy requests (CONNECT, absolute-form) are served.
	OriginalDst OriginalDst
	// Broker takes TLS to brokered hosts; nil: none is brokered.
	Broker Broker
	Events *Events      // nil: none
	Logger *slog.Logger // nil: discarded
}

// Proxy is a machine's egress proxy: transparent (TLS by SNI, HTTP by
// Host, on the port the guest dialled) and explicit (CONNECT and
// absolute-form HTTP), on one listener. It checks every name with Names
// and dials it by name through the Dialer, never an address the guest
// chose.
type Proxy struct {
	cfg     ProxyConfig
	ln      net.Listener
	names   Names
	dialer  Dialer
	origDst OriginalDst
	broker  Broker
	events  *Events
	log     *slog.Logger
	refused refusals
}

// NewProxy returns a proxy over deps.Listener; Run serves it.
func NewProxy(cfg ProxyConfig, deps ProxyDeps) (*Proxy, error) {
	if deps.Listener == nil || deps.Names == nil || deps.Dialer == nil {
		return nil, errors.New("new proxy: Listener, Names and Dialer are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{cfg: cfg.withDefaults(), ln: deps.Listener, names: deps.Names, dialer: deps.Dialer,
		origDst: deps.OriginalDst, broker: deps.Broker, events: deps.Events, log: deps.Logger,
		refused: refusals{events: deps.Events, kind: KindTCP}}, nil
}

// Run serves connections until ctx ends or the listener fails, then
// closes the listener and every connection and joins their goroutines.
func (p *Proxy) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { p.ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer p.refused.flush()
	slots := make(chan struct{}, p.cfg.MaxConns)
	return acceptLoop(ctx, p.ln, p.log, "proxy", func(c net.Conn) {
		select {
		case slots <- struct{}{}:
		default:
			p.refused.add("connections refused: too many at once")
			c.Close()
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			p.serve(ctx, c)
		})
	})
}

// proxyConn is one connection being served.
type proxyConn struct {
	p        *Proxy
	act      activity
	client   *idleConn
	br       *bufio.Reader // reads client; holds what was peeked
	up       *idleConn     // nil until dialled
	upBytes  atomic.Int64  // guest → upstream
	dnBytes  atomic.Int64  // upstream → guest
	ev       Event
	orig     netip.AddrPort // where the guest dialled (OriginalDst); invalid when unknown
	origErr  error          // why orig is unknown
	stopUp   func() bool
	downDone chan struct{}
}

// serve classifies c by its first bytes (a TLS record, or an HTTP
// request: CONNECT, absolute-form or origin-form) and serves it. One
// event tells how it went.
func (p *Proxy) serve(ctx context.Context, c net.Conn) {
	pc := &proxyConn{p: p, ev: Event{Kind: KindTCP, Proto: "tcp", Verdict: Deny}}
	pc.act.touch()
	pc.dialled(c)
	pc.client = &idleConn{Conn: c, idle: p.cfg.IdleTimeout, act: &pc.act}
	pc.br = bufio.NewReaderSize(pc.client, maxPeekBytes)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer func() {
		stop()
		c.Close()
		if pc.up != nil {
			pc.stopUp()
			pc.up.Close()
		}
		pc.ev.BytesUp, pc.ev.BytesDown = pc.upBytes.Load(), pc.dnBytes.Load()
		p.events.Emit(pc.ev)
	}()
	pc.client.hard = time.Now().Add(p.cfg.PeekTimeout)
	first, err := pc.br.Peek(1)
	if err != nil {
		pc.ev.Reason = "no request: " + describe(err)
		return
	}
	if first[0] == recordHandshake {
		p.serveTLS(ctx, pc)
		return
	}
	p.serveHTTP(ctx, pc)
}

// serveTLS passes a transparent TLS connection through to its SNI on the
// port the guest dialled.
func (p *Proxy) serveTLS(ctx context.Context, pc *proxyConn) {
	pc.ev.Kind = KindTLS
	port, err := pc.origPort()
	if err != nil {
		pc.denyTLS(err.Error())
		return
	}
	hello, err := peekClientHello(pc.br)
	if err != nil {
		pc.ev.Host = hello.sent
		pc.denyTLS(describe(err))
		return
	}
	pc.client.hard = time.Time{}
	dest := hostPort{host: hello.sni, port: port}
	pc.ev.Host = hello.sent
	ok, why := p.names.AllowName(dest.host, dest.port)
	if !ok {
		pc.denyTLS(why)
		return
	}
	if err := pc.dialTLS(ctx, dest, &why); err != nil {
		pc.ev.Reason = err.Error()
		pc.writeClient(tlsAlert(alertInternalError))
		return
	}
	pc.allow(why)
	pc.splice(func() error { return copyRaw(countWriter{pc.up, &pc.upBytes}, pc.br) })
}

// brokered reports whether TLS to dest goes to the broker.
func (p *Proxy) brokered(dest hostPort) bool {
	return p.broker != nil && !dest.ip && p.broker.Brokers(dest.host, dest.port)
}

// dialTLS connects a TLS connection to dest: to the broker when dest is
// brokered (why says so), else to dest by name.
func (pc *proxyConn) dialTLS(ctx context.Context, dest hostPort, why *string) error {
	if !pc.p.brokered(dest) {
		return pc.dial(ctx, dest)
	}
	err := pc.connect(ctx, func(dctx context.Context) (net.Conn, error) {
		c, err := pc.p.broker.Dial(dctx, dest.host, dest.port)
		if err != nil {
			return nil, fmt.Errorf("credential broker for %s: %w", dest, err)
		}
		return c, nil
	})
	if err == nil {
		*why += "; brokered: TLS ends at the coordinator, which verifies the upstream and puts the credential in"
	}
	return err
}

// dialled learns where the guest dialled c (OriginalDst) and puts it in
// the event: the address, whatever name the guest claims later, and the
// port, so a connection refused before it says anything is recorded with
// both.
func (pc *proxyConn) dialled(c net.Conn) {
	if pc.p.origDst == nil {
		pc.origErr = errors.New("not a proxy request, and no original destination to go by")
		return
	}
	ap, err := pc.p.origDst(c)
	switch {
	case err != nil:
		pc.origErr = fmt.Errorf("original destination: %w", err)
		return
	case !ap.Addr().IsValid() || ap.Port() == 0:
		pc.origErr = errors.New("original destination: no address and port")
		return
	}
	pc.orig = netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())
	pc.ev.Addr, pc.ev.Port = pc.orig.Addr().String(), pc.orig.Port()
}

// origPort is the port a transparent connection was made to.
func (pc *proxyConn) origPort() (uint16, error) {
	if pc.origErr != nil {
		return 0, pc.origErr
	}
	return pc.orig.Port(), nil
}

// dial connects to dest by name through the Dialer; the upstream is
// closed when the proxy stops.
func (pc *proxyConn) dial(ctx context.Context, dest hostPort) error {
	return pc.connect(ctx, func(dctx context.Context) (net.Conn, error) {
		c, err := pc.p.dialer.DialContext(dctx, "tcp", dest.String())
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", dest, err)
		}
		return c, nil
	})
}

// connect makes the upstream with open, within DialTimeout.
func (pc *proxyConn) connect(ctx context.Context, open func(context.Context) (net.Conn, error)) error {
	dctx, cancel := context.WithTimeout(ctx, pc.p.cfg.DialTimeout)
	defer cancel()
	c, err := open(dctx)
	if err != nil {
		return err
	}
	pc.up = &idleConn{Conn: c, idle: pc.p.cfg.IdleTimeout, act: &pc.act}
	pc.stopUp = context.AfterFunc(ctx, func() { c.Close() })
	return nil
}

// splice copies upstream → guest in a goroutine and runs up (guest →
// upstream) here. When the guest has sent all it will, the upstream's
// write side is closed and its answer finishes; when the upstream ends,
// reading the guest stops. up returning a *refusal (a later request on a
// plain HTTP connection) lets the upstream finish its earlier answers
// (at most PeekTimeout), then answers the refusal and closes.
func (pc *proxyConn) splice(up func() error) {
	pc.downDone = make(chan struct{})
	go func() {
		defer close(pc.downDone)
		copyRaw(countWriter{pc.client, &pc.dnBytes}, pc.up)
		pc.client.abort()
	}()
	err := up()
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		pc.up.closeWrite()
		t := time.NewTimer(pc.p.cfg.PeekTimeout)
		select {
		case <-pc.downDone:
		case <-t.C:
		}
		t.Stop()
		pc.up.Close()
		<-pc.downDone
		pc.refuseLater(ref)
		return
	case err == nil:
		pc.up.closeWrite()
	default:
		pc.up.Close()
	}
	<-pc.downDone
}

// allow records that the connection was allowed.
func (pc *proxyConn) allow(why string) {
	pc.ev.Verdict, pc.ev.Reason = Allow, why
}

// denyTLS refuses a TLS connection with an access_denied alert.
func (pc *proxyConn) denyTLS(why string) {
	pc.ev.Verdict, pc.ev.Reason = Deny, why
	pc.writeClient(tlsAlert(alertAccessDenied))
}

// writeClient writes b to the guest, best effort.
func (pc *proxyConn) writeClient(b []byte) {
	pc.client.Conn.SetWriteDeadline(time.Now().Add(pc.p.cfg.PeekTimeout))
	pc.client.Conn.Write(b)
}

// tlsAlert is a fatal TLS alert record.
func tlsAlert(desc byte) []byte {
	return []byte{recordAlert, 3, 3, 0, 2, 2, desc}
}

// describe is err as an event reason: a timeout says so.
func describe(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	return err.Error()
}
