package egress

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DNSConfig bounds the resolver; zero fields take the defaults.
type DNSConfig struct {
	TTL             time.Duration // of every answer (30 s; at least 1 s)
	QPS             float64       // queries a second, UDP and TCP together (100)
	Burst           int           // queries above QPS at once (200)
	MaxInflight     int           // UDP queries being answered at once (64)
	MaxTCPConns     int           // TCP connections at once (16)
	IdleTimeout     time.Duration // a TCP connection's wait for its next query (10 s)
	UpstreamTimeout time.Duration // one upstream lookup (3 s)
	MaxAnswers      int           // addresses in one answer (16)
	// IPv4Only answers AAAA queries with no address (the guest's network
	// has no IPv6 to reach one with).
	IPv4Only bool
}

func (c DNSConfig) withDefaults() DNSConfig {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.TTL, 30*time.Second)
	c.TTL = max(c.TTL, time.Second)
	def(&c.IdleTimeout, 10*time.Second)
	def(&c.UpstreamTimeout, 3*time.Second)
	if c.QPS <= 0 {
		c.QPS = 100
	}
	defInt(&c.Burst, 200)
	defInt(&c.MaxInflight, 64)
	defInt(&c.MaxTCPConns, 16)
	defInt(&c.MaxAnswers, 16)
	return c
}

// DNSDeps is what the resolver serves on and asks.
type DNSDeps struct {
	UDP      net.PacketConn // nil: no UDP
	TCP      net.Listener   // nil: no TCP
	Names    Names
	Upstream Upstream
	Addrs    Addrs
	Events   *Events      // nil: none
	Logger   *slog.Logger // nil: discarded
	// Present maps an answered address that passed Addrs to the one the
	// guest is told (an address the guest would reach on its own side,
	// such as loopback, becomes one it routes to the proxy; the proxy dials
	// by name whatever address the guest used). nil: as answered.
	Present func(netip.Addr) netip.Addr
}

// DNS is a machine's filtering resolver.
type DNS struct {
	cfg      DNSConfig
	udp      net.PacketConn
	tcp      net.Listener
	names    Names
	upstream Upstream
	addrs    Addrs
	present  func(netip.Addr) netip.Addr
	events   *Events
	log      *slog.Logger
	limit    *rate.Limiter
	refused  refusals
}

// NewDNS returns a resolver over deps' listeners; Run serves them.
func NewDNS(cfg DNSConfig, deps DNSDeps) (*DNS, error) {
	switch {
	case deps.UDP == nil && deps.TCP == nil:
		return nil, errors.New("new resolver: no UDP or TCP listener")
	case deps.Names == nil || deps.Upstream == nil || deps.Addrs == nil:
		return nil, errors.New("new resolver: Names, Upstream and Addrs are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	d := &DNS{cfg: cfg, udp: deps.UDP, tcp: deps.TCP, names: deps.Names, upstream: deps.Upstream,
		addrs: deps.Addrs, present: deps.Present, events: deps.Events, log: deps.Logger,
		limit: rate.NewLimiter(rate.Limit(cfg.QPS), cfg.Burst)}
	d.refused = refusals{events: deps.Events, kind: KindDNS}
	return d, nil
}

// Run serves queries until ctx ends or a listener fails, then closes the
// listeners and connections and joins every goroutine it started.
func (d *DNS) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	if d.udp != nil {
		wg.Go(func() {
			errs[0] = d.serveUDP(ctx)
			cancel()
		})
		stop := context.AfterFunc(ctx, func() { d.udp.Close() })
		defer stop()
	}
	if d.tcp != nil {
		wg.Go(func() {
			errs[1] = d.serveTCP(ctx)
			cancel()
		})
		stop := context.AfterFunc(ctx, func() { d.tcp.Close() })
		defer stop()
	}
	wg.Wait()
	d.refused.flush()
	return errors.Join(errs...)
}

// serveUDP answers each datagram in its own goroutine, at most
// MaxInflight at once; a query over the rate or past MaxInflight is
// dropped (and counted).
func (d *DNS) serveUDP(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := make(chan struct{}, d.cfg.MaxInflight)
	buf := make([]byte, maxQueryBytes)
	for {
		n, from, err := d.udp.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("resolver: read udp: %w", err)
			}
			d.log.Warn("resolver: read udp", "err", err)
			if !sleepCtx(ctx, 10*time.Millisecond) {
				return nil
			}
			continue
		}
		if !d.limit.Allow() {
			d.refused.add("queries over the rate limit dropped")
			continue
		}
		select {
		case inflight <- struct{}{}:
		default:
			d.refused.add("queries dropped: too many being answered")
			continue
		}
		msg := bytes.Clone(buf[:n])
		wg.Go(func() {
			defer func() { <-inflight }()
			if out := d.answer(ctx, msg, true); out != nil {
				if _, err := d.udp.WriteTo(out, from); err != nil && ctx.Err() == nil {
					d.log.Debug("resolver: write udp", "err", err)
				}
			}
		})
	}
}

// serveTCP serves at most MaxTCPConns connections at once; more are
// closed at once (and counted).
func (d *DNS) serveTCP(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	conns := make(chan struct{}, d.cfg.MaxTCPConns)
	return acceptLoop(ctx, d.tcp, d.log, "resolver", func(c net.Conn) {
		select {
		case conns <- struct{}{}:
		default:
			d.refused.add("TCP connections refused: too many at once")
			c.Close()
			return
		}
		wg.Go(func() {
			defer func() { <-conns }()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			d.serveTCPConn(ctx, c)
		})
	})
}

// serveTCPConn answers length-prefixed queries one after the other until
// the client stops, goes idle or sends a message over maxQueryBytes.
func (d *DNS) serveTCPConn(ctx context.Context, c net.Conn) {
	var hdr [2]byte
	buf := make([]byte, maxQueryBytes)
	for {
		c.SetReadDeadline(time.Now().Add(d.cfg.IdleTimeout))
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n == 0 || n > maxQueryBytes {
			d.refused.add("TCP queries over their size bound")
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		if err := d.limit.Wait(ctx); err != nil {
			return
		}
		out := d.answer(ctx, buf[:n], false)
		if out == nil {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(d.cfg.IdleTimeout))
		msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(out)), uint16(len(out)))
		if _, err := c.Write(append(msg, out...)); err != nil {
			return
		}
	}
}
