package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// Gateway serving bounds.
const (
	tunnelHeaderLimit = time.Minute      // a request's headers, once its first byte came
	tunnelIdleLimit   = 5 * time.Minute  // a kept-alive connection without requests
	linkWait          = 15 * time.Second // a request waits this long for the coordinator link to come back
	linkPoll          = 100 * time.Millisecond
)

// serveTunnel serves HTTP on one guest connection (keep-alive: any number
// of requests) until it ends or ctx does, and returns how many requests it
// carried. Every handler has returned when it returns.
func (rl *Relay) serveTunnel(ctx context.Context, mc *machines.Machine, conn net.Conn, log *slog.Logger) int {
	var (
		requests atomic.Int64
		handlers sync.WaitGroup
		ended    = make(chan struct{})
		endOnce  sync.Once
	)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handlers.Add(1) // before any hijack, so before ended closes
			defer handlers.Done()
			requests.Add(1)
			rl.forwardGateway(w, r, mc, log)
		}),
		ReadHeaderTimeout: tunnelHeaderLimit,
		MaxHeaderBytes:    guestapi.MaxHeaderBytes, // a guest process's request headers
		IdleTimeout:       tunnelIdleLimit,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				endOnce.Do(func() { close(ended) })
			}
		},
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	l := newOneConnListener(conn)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l) // accepts conn, then waits for l to close
	}()
	<-ended
	_ = l.Close()
	<-served
	handlers.Wait()
	n := int(requests.Load())
	log.Debug("gateway connection ended", "requests", n)
	return n
}

// forwardGateway sends one request of a guest process to the coordinator's
// gateway for mc's session and streams the answer back as it comes. The
// request counts as activity of the session while it lasts.
func (rl *Relay) forwardGateway(w http.ResponseWriter, r *http.Request, mc *machines.Machine, log *slog.Logger) {
	done := mc.Active()
	defer done()
	if !strings.HasPrefix(r.URL.Path, "/") {
		writeTunnelError(w, http.StatusBadRequest, fmt.Sprintf("bad gateway path %q", r.URL.Path))
		return
	}
	client, err := rl.waitLink(r.Context())
	if err != nil {
		writeTunnelError(w, http.StatusServiceUnavailable, "the host has no link to the coordinator: "+err.Error())
		return
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	prefix := hostlink.PathGateway + mc.SessionID()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "coordinator"
			pr.Out.URL.Path = prefix + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			if pr.In.URL.RawPath != "" {
				pr.Out.URL.RawPath = prefix + pr.In.URL.RawPath
			}
			pr.Out.Host = "coordinator"
			for name := range pr.Out.Header {
				if strings.HasPrefix(strings.ToLower(name), "engrams-") { // only the host speaks for the session
					pr.Out.Header.Del(name)
				}
			}
		},
		Transport:     client.Transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			log.Info("gateway request did not reach the coordinator", "err", err)
			writeTunnelError(w, http.StatusBadGateway, "the host could not reach the coordinator: "+err.Error())
		},
	}
	proxy.ServeHTTP(w, r)
}

// waitLink returns the coordinator link's client, waiting up to linkWait
// for a link being redialed.
func (rl *Relay) waitLink(ctx context.Context) (*http.Client, error) {
	if c := rl.link.Client(); c != nil && c.Transport != nil {
		return c, nil
	}
	tick := time.NewTicker(linkPoll)
	defer tick.Stop()
	limit := time.NewTimer(linkWait)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-limit.C:
			return nil, errNoLink
		case <-tick.C:
			if c := rl.link.Client(); c != nil && c.Transport != nil {
				return c, nil
			}
		}
	}
}

// writeTunnelError answers a guest process when its request cannot reach
// the coordinator, in a shape both providers' clients read (error.message).
// 5xx: clients may retry.
func writeTunnelError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":  "error",
		"error": map[string]any{"type": "api_error", "message": "engrams model gateway: " + msg},
	})
}

// oneConnListener hands out one connection, then waits to be closed.
type oneConnListener struct {
	mu     sync.Mutex
	conn   net.Conn
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: c, closed: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return tunnelAddr{} }

// tunnelAddr names the guest end of a tunnel.
type tunnelAddr struct{}

func (tunnelAddr) Network() string { return "engrams-tunnel" }
func (tunnelAddr) String() string  { return "guest" }
