package hostlink

import (
	"github.com/engrams/engrams/internal/domain"

	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
	// PingTimeout is how long the host of a held link has to answer a ping
	// when a second connection of the same host asks whether that link is
	// still live (Holds): one whose ping fails is closed, one still waiting
	// for its answer after PingTimeout counts as live. 0 = 2s.
	PingTimeout time.Duration
}

// Credential is who a host token authenticates.
type Credential struct {
	HostID  domain.HostID
	TokenID string
}

// LinkInfo is one host link as the coordinator end holds it.
type LinkInfo struct {
	ID      string // random, one per connection
	HostID  domain.HostID
	TokenID string
	Remote  string
	Since   time.Time
}

// ServerDeps are what the coordinator end needs.
type ServerDeps struct {
	// Authenticate maps a host's bearer token to its credential. Any error
	// refuses the connection with 401.
	Authenticate func(ctx context.Context, bearerToken string) (Credential, error)
	// Admit decides whether a new link may hold its host (it may be the
	// host's only live link across every replica) and records it as the
	// holder. A *Refusal is answered as it is (409 with
	// CodeAlreadyConnected while another live link holds the host); any
	// other error answers 503. nil: a link is admitted unless this Server
	// holds a live link of the same host (one whose host answers a ping).
	Admit func(ctx context.Context, l LinkInfo) error
	// Release is called once an admitted link has ended (nil: nothing).
	Release func(ctx context.Context, l LinkInfo)
	// Handler serves the requests hosts send (PathRegister, PathHeartbeat);
	// HostIDFrom and LinkFrom name the sending host and its link.
	Handler http.Handler
	// OnConnect is called once a host's link is up. OnDisconnect is called
	// when it ends, unless a newer link of the same host replaced it.
	OnConnect    func(hostID domain.HostID)
	OnDisconnect func(hostID domain.HostID)
	Logger       *slog.Logger
}

// Server is the coordinator end of host links: an http.Handler for
// PathConnect that holds at most one link per host.
type Server struct {
	cfg  ServerConfig
	deps ServerDeps
	log  *slog.Logger

	mu        sync.Mutex
	closed    bool
	links     map[domain.HostID]*serverLink
	admitting map[domain.HostID]LinkInfo // connections being admitted, one per host
	wg        sync.WaitGroup             // one per ServeHTTP holding a link
}

type serverLink struct {
	info LinkInfo
	s    *session
}

// NewServer returns the coordinator end of host links.
func NewServer(cfg ServerConfig, deps ServerDeps) *Server {
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 2 * time.Second
	}
	return &Server{cfg: cfg, deps: deps, log: orDiscard(deps.Logger),
		links: map[domain.HostID]*serverLink{}, admitting: map[domain.HostID]LinkInfo{}}
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
	cred, err := s.deps.Authenticate(r.Context(), token)
	if err != nil || cred.HostID == "" {
		s.log.Info("hostlink connect refused", "reason", "authentication failed", "err", err, "remote_addr", r.RemoteAddr)
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "host token refused")
		return
	}
	info := LinkInfo{ID: newLinkID(), HostID: cred.HostID, TokenID: cred.TokenID, Remote: r.RemoteAddr, Since: time.Now()}
	if !s.hold() {
		WriteError(w, http.StatusServiceUnavailable, CodeUnavailable, "coordinator shutting down")
		return
	}
	defer s.wg.Done()
	if ref := s.admit(r.Context(), info); ref != nil {
		s.log.Info("hostlink connect refused", "host_id", info.HostID, "code", ref.Code, "reason", ref.Msg, "remote_addr", r.RemoteAddr)
		WriteRefusal(w, ref)
		return
	}
	w.Header().Set(HeaderVersion, strconv.Itoa(Version))
	w.Header().Set(HeaderHostID, string(info.HostID))
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		s.log.Info("hostlink upgrade failed", "host_id", info.HostID, "err", err)
		s.endAdmission(info)
		s.release(info)
		return // Accept answered the request
	}
	s.serveLink(info, c)
}

// hold counts a ServeHTTP that may come to hold a link; false once closed.
func (s *Server) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// admit decides whether l may hold its host; nil admits it, and l is
// being admitted until serveLink holds it or endAdmission drops it.
func (s *Server) admit(ctx context.Context, l LinkInfo) *Refusal {
	s.mu.Lock()
	if _, busy := s.admitting[l.HostID]; busy {
		s.mu.Unlock()
		return &Refusal{Status: http.StatusConflict, Code: CodeAlreadyConnected, RetryAfter: time.Second,
			Msg: fmt.Sprintf("another connection of host %s is being admitted right now", l.HostID)}
	}
	s.admitting[l.HostID] = l
	old := s.links[l.HostID]
	s.mu.Unlock()
	var ref *Refusal
	if s.deps.Admit == nil {
		if old != nil && s.answers(old) {
			ref = AlreadyConnected(string(l.HostID), old.info.Remote, old.info.Since, 0)
		}
	} else if err := s.deps.Admit(ctx, l); err != nil && !errors.As(err, &ref) {
		ref = &Refusal{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Msg: "cannot admit the host link: " + err.Error()}
	}
	if ref != nil {
		s.endAdmission(l)
	}
	return ref
}

func (s *Server) endAdmission(l LinkInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admitting[l.HostID].ID == l.ID {
		delete(s.admitting, l.HostID)
	}
}

func (s *Server) release(l LinkInfo) {
	if s.deps.Release != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.deps.Release(ctx, l)
	}
}

func (s *Server) serveLink(info LinkInfo, c *websocket.Conn) {
	hostID := info.HostID
	log := s.log.With("host_id", hostID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer func() { _ = c.CloseNow() }()
	defer s.release(info)
	nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
	ys, err := yamux.Server(newFrameConn(nc), yamuxConfig(s.cfg.KeepAliveInterval, s.cfg.WriteTimeout, log))
	if err != nil {
		s.endAdmission(info)
		log.Error("hostlink session failed", "err", err)
		return
	}
	base := WithLink(ctx, info)
	l := &serverLink{info: info, s: newSession(ys, s.deps.Handler, base, "host "+string(hostID), ErrHostNotConnected, log)}
	defer l.s.close()

	s.mu.Lock()
	if s.admitting[hostID].ID == info.ID {
		delete(s.admitting, hostID)
	}
	if s.closed {
		s.mu.Unlock()
		return
	}
	old := s.links[hostID]
	s.links[hostID] = l
	s.mu.Unlock()
	if old != nil {
		log.Info("hostlink replaced: the older link ended or went silent", "old_remote_addr", old.info.Remote)
		_ = old.s.sess.Close() // its own ServeHTTP joins and cleans up
	}
	log.Info("hostlink connected", "remote_addr", info.Remote, "link_id", info.ID)
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
		log.Info("hostlink disconnected", "link_id", info.ID)
		if s.deps.OnDisconnect != nil {
			s.deps.OnDisconnect(hostID)
		}
	}
}

// answers reports whether l's link is live: its host answers a ping, or
// the ping is still under way after PingTimeout (a busy host or a long
// queue of frames is slow, not gone; yamux's keepalive ends a link that
// stays silent). A link whose ping fails is closed here.
func (s *Server) answers(l *serverLink) bool {
	if l.s.sess.IsClosed() {
		return false
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.s.sess.Ping()
		done <- err
	}()
	t := time.NewTimer(s.cfg.PingTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, yamux.ErrTimeout) {
			return true
		}
		s.log.Info("hostlink closed: its ping failed", "host_id", l.info.HostID, "link_id", l.info.ID, "err", err)
		_ = l.s.sess.Close()
		return false
	case <-t.C:
		return true // the ping goroutine ends with the ping or the session
	}
}

// Holds reports whether this Server holds link linkID of hostID and it is
// live: being admitted, or held with its host answering a ping (a held
// link whose host does not answer is closed).
func (s *Server) Holds(hostID domain.HostID, linkID string) bool {
	s.mu.Lock()
	if a, ok := s.admitting[hostID]; ok && a.ID == linkID {
		s.mu.Unlock()
		return true
	}
	l := s.links[hostID]
	s.mu.Unlock()
	return l != nil && l.info.ID == linkID && s.answers(l)
}

// Links lists the links this Server holds, by host id.
func (s *Server) Links() []LinkInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LinkInfo, 0, len(s.links))
	for _, l := range s.links {
		out = append(out, l.info)
	}
	slices.SortFunc(out, func(a, b LinkInfo) int { return strings.Compare(string(a.HostID), string(b.HostID)) })
	return out
}

// CloseLink ends hostID's link if this Server holds it and it is linkID (any
// link of the host when linkID is ""); it reports whether it closed one.
// The link's own ServeHTTP cleans up.
func (s *Server) CloseLink(hostID domain.HostID, linkID string) bool {
	s.mu.Lock()
	l := s.links[hostID]
	s.mu.Unlock()
	if l == nil || (linkID != "" && l.info.ID != linkID) {
		return false
	}
	return l.s.sess.Close() == nil
}

func newLinkID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
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
