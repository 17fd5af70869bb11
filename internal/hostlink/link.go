package hostlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/net/netutil"
)

// Defaults shared by both ends.
const (
	defaultKeepAlive    = 15 * time.Second
	defaultWriteTimeout = 10 * time.Second
	// linkHost is the URL host of requests sent over a link: the stream
	// decides where a request goes, not the URL.
	linkHost = "hostlink"
)

func yamuxConfig(keepAlive, writeTimeout time.Duration, logger *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.KeepAliveInterval = cmp(keepAlive, defaultKeepAlive)
	cfg.ConnectionWriteTimeout = cmp(writeTimeout, defaultWriteTimeout)
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return cfg
}

func cmp(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// group counts running handlers so that closing can join them; once closed
// it admits nobody.
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (g *group) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *group) done() { g.wg.Done() }

func (g *group) closeAndWait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// Bounds on what one end of a link serves for its peer.
const (
	// MaxServedStreams bounds the streams an end serves at once (256): a
	// host's requests in flight are a heartbeat, event relays, guest-bound
	// reports and gateway tunnels, which a host holds at most 32 of per
	// machine.
	MaxServedStreams = 256
	// MaxHeaderBytes bounds a request's header block on a link (64 KiB).
	MaxHeaderBytes = 64 << 10
)

// session is one end of a link: a yamux session serving HTTP on the streams
// the peer opens and sending HTTP on streams it opens.
type session struct {
	sess      *yamux.Session
	srv       *http.Server
	handlers  group
	served    chan struct{}
	transport *http.Transport
	closeOnce sync.Once
	peer      string // "host <id>" or "coordinator", for errors
	gone      error  // category returned once the session is closed
}

// newSession starts serving h on the streams sess accepts. baseCtx is the
// parent of every request context.
func newSession(sess *yamux.Session, h http.Handler, baseCtx context.Context, peer string, gone error, logger *slog.Logger) *session {
	s := &session{sess: sess, served: make(chan struct{}), peer: peer, gone: gone}
	if h == nil {
		h = http.NotFoundHandler()
	}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.handlers.add() {
				WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "link closing")
				return
			}
			defer s.handlers.done()
			h.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	s.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			st, err := sess.OpenStream()
			if err != nil {
				return nil, fmt.Errorf("open stream to %s: %w", peer, err)
			}
			return st, nil
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     time.Minute,
	}
	go func() {
		defer close(s.served)
		// The peer may be hostile (a compromised host): at most
		// MaxServedStreams are served at once; more wait in yamux's accept
		// backlog, and past that yamux resets them.
		_ = s.srv.Serve(netutil.LimitListener(sess, MaxServedStreams)) // returns once the session closes
	}()
	return s
}

func (s *session) closed() <-chan struct{} { return s.sess.CloseChan() }

// close ends the session and joins every goroutine it started, handlers
// included. Hijacked streams end with the session.
func (s *session) close() {
	s.closeOnce.Do(func() {
		_ = s.sess.Close()
		_ = s.srv.Close()
		<-s.served
		s.handlers.closeAndWait()
		s.transport.CloseIdleConnections()
	})
}

// roundTripper sends requests over new streams; only the path and query of
// a request's URL matter.
func (s *session) roundTripper() http.RoundTripper { return linkRoundTripper{s} }

type linkRoundTripper struct{ s *session }

func (rt linkRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.s.sess.IsClosed() {
		closeBody(req)
		return nil, fmt.Errorf("send %s %s to %s: %w", req.Method, req.URL.Path, rt.s.peer, rt.s.gone)
	}
	out := req.Clone(req.Context())
	out.URL.Scheme = "http"
	out.URL.Host = linkHost
	if out.Host == "" {
		out.Host = linkHost
	}
	resp, err := rt.s.transport.RoundTrip(out)
	if err != nil {
		if rt.s.sess.IsClosed() || errors.Is(err, yamux.ErrSessionShutdown) {
			return nil, fmt.Errorf("send %s %s to %s: %w: %w", req.Method, req.URL.Path, rt.s.peer, rt.s.gone, err)
		}
		return nil, err
	}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
