package broker

import (
	"context"
	"crypto/tls"
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

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// refusal is a PathBroker request refused before the upgrade.
type refusal struct {
	status int
	code   string
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// conn is one guest TLS connection the broker serves.
type conn struct {
	sid   domain.SessionID
	epoch int64
	grant domain.BrokeredGrant
	// peers are the brokered hosts whose grant is the same credential
	// (github.com and api.github.com): their placeholders are put in here
	// too, since the credential is for this host as much as theirs.
	peers []string
	name  string // the brokered host's name
	port  uint16
	log   *slog.Logger
	creds map[accessKind]cred // once opened
	scrub *scrubber           // of every credential in creds
}

// handleBroker serves one PathBroker request: the session must run on the
// sending host at the epoch given, in a live state, with hostPort among
// its brokered hosts; then the stream is the guest's TLS, served here.
func (b *Broker) handleBroker(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	q := r.URL.Query()
	sid := domain.SessionID(r.PathValue("id"))
	hostPort := q.Get(hostlink.BrokerQueryHost)
	log := b.log.With("session_id", sid, "host_id", hostID, "upstream", hostPort)
	c, err := b.admit(r, hostID, sid, q.Get(hostlink.BrokerQueryEpoch), hostPort)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		log.Warn("broker request refused", "reason", ref.msg)
		hostlink.WriteError(w, ref.status, ref.code, ref.msg)
		return
	case err != nil:
		log.Error("broker request failed", "err", err)
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, "the credential broker failed; the coordinator's log says why")
		return
	}
	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	default:
		hostlink.WriteError(w, http.StatusServiceUnavailable, hostlink.CodeCapacity, "the credential broker serves as many connections as it takes")
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, "the link cannot be upgraded")
		return
	}
	raw, brw, err := hj.Hijack()
	if err != nil {
		log.Warn("broker: hijack", "err", err)
		return
	}
	defer raw.Close()
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + hostlink.BrokerUpgrade + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		return
	}
	c.log = log
	// What the link's server buffered is read from it, the rest from the
	// stream itself (reading on through the server's reader would tie the
	// stream to the hijacked request's reads).
	var guest net.Conn = raw
	if n := brw.Reader.Buffered(); n > 0 {
		guest = &readerConn{Conn: raw, r: io.MultiReader(io.LimitReader(brw.Reader, int64(n)), raw)}
	}
	b.serve(r.Context(), guest, c)
}

// admit checks a PathBroker request and returns the connection to serve.
func (b *Broker) admit(r *http.Request, hostID domain.HostID, sid domain.SessionID, epochText, hostPort string) (*conn, error) {
	if hostID == "" {
		return nil, &refusal{http.StatusUnauthorized, hostlink.CodeUnauthorized, "broker requests come from hosts over their link"}
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), hostlink.BrokerUpgrade) {
		return nil, &refusal{http.StatusBadRequest, hostlink.CodeBadRequest, "a broker request upgrades to " + hostlink.BrokerUpgrade}
	}
	epoch, err := strconv.ParseInt(epochText, 10, 64)
	if err != nil {
		return nil, &refusal{http.StatusBadRequest, hostlink.CodeBadRequest, "a broker request names the session's epoch"}
	}
	name, portText, err := net.SplitHostPort(hostPort)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if err != nil || perr != nil || name == "" {
		return nil, &refusal{http.StatusBadRequest, hostlink.CodeBadRequest, "a broker request names a host:port"}
	}
	s, err := b.st.GetSession(r.Context(), sid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &refusal{http.StatusNotFound, hostlink.CodeNotFound, "no such session"}
	}
	if err != nil {
		return nil, fmt.Errorf("broker: read session %s: %w", sid, err)
	}
	if !s.RunsOn(hostID, epoch) {
		return nil, &refusal{http.StatusConflict, hostlink.CodeStaleEpoch, fmt.Sprintf("%s; the broker request came from host %s at epoch %d", s.Where(), hostID, epoch)}
	}
	if !s.State.MayUseCredentials() {
		return nil, &refusal{http.StatusForbidden, hostlink.CodeUnauthorized, fmt.Sprintf("this session is %s", s.State)}
	}
	g, ok := s.Spec.BrokeredGrant(hostPort)
	if !ok {
		return nil, &refusal{http.StatusForbidden, hostlink.CodeUnauthorized, fmt.Sprintf("%s is not brokered for this session", hostPort)}
	}
	var peers []string
	for _, o := range s.Spec.Brokered {
		if o.SecretID == g.SecretID {
			peers = append(peers, o.Host)
		}
	}
	return &conn{sid: sid, epoch: epoch, grant: g, peers: peers, name: name, port: uint16(port)}, nil
}

// serve terminates the guest's TLS with a leaf for c.name (an SNI naming
// anything else fails the handshake) and serves its HTTP/1.1 requests
// until the connection ends or ctx does.
func (b *Broker) serve(ctx context.Context, raw net.Conn, c *conn) {
	a, err := b.authority(ctx)
	if err != nil {
		c.log.Error("broker: CA", "err", err)
		return
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !strings.EqualFold(hello.ServerName, c.name) {
				return nil, fmt.Errorf("SNI %.80q is not the brokered host %s", hello.ServerName, c.name)
			}
			return a.leaf(c.name, b.now())
		}}
	tc := tls.Server(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, b.cfg.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		b.record(ctx, c, hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressDeny, Reason: "brokered TLS handshake failed: " + err.Error()})
		return
	}
	ln := &oneConn{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           b.requests(c),
		MaxHeaderBytes:    hostlink.MaxHeaderBytes,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       b.cfg.IdleTimeout,
		// OPTIONS * is judged like any request, not answered by net/http.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		},
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	_ = srv.Serve(ln)
}

// readerConn reads r, then the conn.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// oneConn is a listener that accepts one connection, then waits until it
// is closed.
type oneConn struct {
	c     net.Conn
	taken bool
	done  chan struct{}
	once  sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.taken {
		l.taken = true
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// record sends one decision to the session's egress log (when the broker
// has one), the host and port filled in.
func (b *Broker) record(ctx context.Context, c *conn, e hostlink.EgressEvent) {
	if e.Host == "" {
		e.Host, e.Port = c.name, c.port
	}
	e.At = b.now()
	if e.Verdict == hostlink.EgressDeny {
		c.log.Info("broker refused", "reason", e.Reason)
	}
	if b.events == nil {
		return
	}
	if err := b.events.Record(context.WithoutCancel(ctx), c.sid, c.epoch, []hostlink.EgressEvent{e.Clipped()}); err != nil {
		c.log.Warn("broker: record egress event", "err", err)
	}
}
