package hostlink

import (
	"github.com/engrams/engrams/internal/domain"

	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
)

// ServerConfig tunes the coordinator end.
type ServerConfig struct {
	KeepAliveInterval time.Duration // yamux ping interval; 0 = 15s
	WriteTimeout      time.Duration // a stuck write closes the link; 0 = 10s
}

// ServerDeps are what the coordinator end needs.
type ServerDeps struct {
	// Authenticate maps a host's bearer token to its host id. Any error
	// refuses the connection with 401.
	Authenticate func(ctx context.Context, bearerToken string) (hostID domain.HostID, err error)
	// Handler serves the requests hosts send (PathRegister, PathHeartbeat);
	// HostIDFrom(r.Context()) names the sending host.
	Handler http.Handler
	// OnConnect is called once a host's link is up. OnDisconnect is called
	// when it ends, unless a newer link of the same host replaced it.
	OnConnect    func(hostID domain.HostID)
	OnDisconnect func(hostID domain.HostID)
	Logger       *slog.Logger
}

// Server is the coordinator end of host links: an http.Handler for
// PathConnect that holds one link per connected host.
type Server struct {
	cfg  ServerConfig
	deps ServerDeps
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	links  map[domain.HostID]*serverLink
	wg     sync.WaitGroup // one per ServeHTTP holding a link
}

type serverLink struct {
	hostID domain.HostID
	s      *session
}

// NewServer returns the coordinator end of host links.
func NewServer(cfg ServerConfig, deps ServerDeps) *Server {
	return &Server{cfg: cfg, deps: deps, log: orDiscard(deps.Logger), links: map[domain.HostID]*serverLink{}}
}

// ServeHTTP accepts a host's connection on PathConnect and holds it until
// the link ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg, ok := checkHostVersion(r.Header.Get(HeaderVersion)); !ok {
		s.log.Info("hostlink connect refused", "reason", msg, "remote_addr", r.RemoteAddr)
		w.Header().Set(HeaderVersion, strconv.Itoa(Version))
		WriteError(w, http.StatusBadRequest, "version_mismatch", msg)
		return
	}
	token, ok := bearerToken(r)
	if !ok {
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "missing bearer token")
		return
	}
	if s.deps.Authenticate == nil {
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "no host authentication configured")
		return
	}
	hostID, err := s.deps.Authenticate(r.Context(), token)
	if err != nil || hostID == "" {
		s.log.Info("hostlink connect refused", "reason", "authentication failed", "error", err, "remote_addr", r.RemoteAddr)
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "host token refused")
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "coordinator shutting down")
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	w.Header().Set(HeaderVersion, strconv.Itoa(Version))
	w.Header().Set(HeaderHostID, string(hostID))
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		s.log.Info("hostlink upgrade failed", "host_id", hostID, "error", err)
		return // Accept answered the request
	}
	s.serveLink(hostID, c, r.RemoteAddr)
}

func (s *Server) serveLink(hostID domain.HostID, c *websocket.Conn, remote string) {
	log := s.log.With("host_id", hostID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer func() { _ = c.CloseNow() }()
	nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
	ys, err := yamux.Server(newFrameConn(nc), yamuxConfig(s.cfg.KeepAliveInterval, s.cfg.WriteTimeout, log))
	if err != nil {
		log.Error("hostlink session failed", "error", err)
		return
	}
	base := WithHostID(ctx, hostID)
	l := &serverLink{hostID: hostID, s: newSession(ys, s.deps.Handler, base, "host "+string(hostID), ErrHostNotConnected, log)}
	defer l.s.close()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	old := s.links[hostID]
	s.links[hostID] = l
	s.mu.Unlock()
	if old != nil {
		log.Info("hostlink replaced by a newer connection")
		_ = old.s.sess.Close() // its own ServeHTTP joins and cleans up
	}
	log.Info("hostlink connected", "remote_addr", remote)
	if s.deps.OnConnect != nil {
		s.deps.OnConnect(hostID)
	}

	<-l.s.closed()
	l.s.close()

	s.mu.Lock()
	current := s.links[hostID] == l
	if current {
		delete(s.links, hostID)
	}
	s.mu.Unlock()
	if current {
		log.Info("hostlink disconnected")
		if s.deps.OnDisconnect != nil {
			s.deps.OnDisconnect(hostID)
		}
	}
}

// Transport returns a RoundTripper that sends requests to hostID over its
// link, if this Server holds one. Only the path and query of a request URL
// are used. Streaming bodies and upgrades (101) work.
func (s *Server) Transport(hostID domain.HostID) (http.RoundTripper, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.links[hostID]
	if !ok {
		return nil, false
	}
	return l.s.roundTripper(), true
}

// Connected lists the ids of the hosts linked to this Server, sorted.
func (s *Server) Connected() []domain.HostID {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]domain.HostID, 0, len(s.links))
	for id := range s.links {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Run blocks until ctx ends, then closes the Server.
func (s *Server) Run(ctx context.Context) error {
	<-ctx.Done()
	return s.Close()
}

// Close ends every link, refuses new ones and joins every goroutine the
// Server started.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	links := make([]*serverLink, 0, len(s.links))
	for _, l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		_ = l.s.sess.Close()
	}
	s.wg.Wait()
	return nil
}

// checkHostVersion explains a host's protocol version that differs from
// ours, and what to upgrade.
func checkHostVersion(v string) (string, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case v == "" || err != nil:
		return fmt.Sprintf("host speaks hostlink protocol %q (header %s missing or invalid), this coordinator speaks %d: upgrade the host agent to a release that speaks protocol %d",
			v, HeaderVersion, Version, Version), false
	case n < Version:
		return fmt.Sprintf("host speaks hostlink protocol %d, this coordinator speaks %d: upgrade the host agent to a release that speaks protocol %d",
			n, Version, Version), false
	case n > Version:
		return fmt.Sprintf("host speaks hostlink protocol %d, this coordinator speaks %d: upgrade the coordinator to a release that speaks protocol %d (or run a host agent that speaks %d)",
			n, Version, n, Version), false
	}
	return "", true
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	t := strings.TrimSpace(h[len(p):])
	return t, t != ""
}
