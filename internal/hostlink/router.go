package hostlink

import (
	"github.com/engrams/engrams/internal/domain"

	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// Cross-replica routing: a request for a host linked to another replica is
// forwarded to that replica's PeerHandler, which sends it over the link.
const (
	// PathPeerPrefix is where Router.PeerHandler is mounted:
	// PathPeerPrefix + {host_id} + "/link" + the path for the host.
	PathPeerPrefix = "/internal/v1/hosts/"
	// HeaderClusterSecret authenticates one replica to another.
	HeaderClusterSecret = "Engrams-Cluster-Secret"
	// HeaderLinkError marks an answer written by the link itself (not by the
	// host); its value is the ErrorBody code.
	HeaderLinkError = "Engrams-Hostlink-Error"
)

// RouterConfig names this replica and the secret replicas share.
type RouterConfig struct {
	ReplicaID     string
	ClusterSecret string
}

// RouterDeps are what a Router needs.
type RouterDeps struct {
	Local *Server
	// Lookup names the replica holding hostID's link (from the Host row).
	Lookup func(ctx context.Context, hostID domain.HostID) (replicaID, replicaAddr string, err error)
	// PeerTransport carries requests between replicas; nil = a private
	// http.Transport.
	PeerTransport http.RoundTripper
	Logger        *slog.Logger
}

// Router finds the way to a host from any replica.
type Router struct {
	cfg  RouterConfig
	deps RouterDeps
	log  *slog.Logger
	peer http.RoundTripper
	own  *http.Transport
}

// NewRouter returns a Router.
func NewRouter(cfg RouterConfig, deps RouterDeps) *Router {
	r := &Router{cfg: cfg, deps: deps, log: orDiscard(deps.Logger), peer: deps.PeerTransport}
	if r.peer == nil {
		r.own = &http.Transport{
			Proxy:                 nil,
			DisableCompression:    true,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       time.Minute,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		r.peer = r.own
	}
	return r
}

// Close releases idle connections to peers.
func (r *Router) Close() error {
	if r.own != nil {
		r.own.CloseIdleConnections()
	}
	return nil
}

// Transport returns a RoundTripper to hostID: its local link when this
// replica holds it, otherwise through the replica that does. Only the path
// and query of a request URL are used. ErrHostNotConnected when no replica
// holds the host's link.
func (r *Router) Transport(ctx context.Context, hostID domain.HostID) (http.RoundTripper, error) {
	if r.deps.Local != nil {
		if rt, ok := r.deps.Local.Transport(hostID); ok {
			return rt, nil
		}
	}
	if r.deps.Lookup == nil {
		return nil, fmt.Errorf("route to host %s: %w", hostID, ErrHostNotConnected)
	}
	replicaID, addr, err := r.deps.Lookup(ctx, hostID)
	if err != nil {
		return nil, fmt.Errorf("look up replica of host %s: %w", hostID, err)
	}
	if replicaID == "" || addr == "" || replicaID == r.cfg.ReplicaID {
		return nil, fmt.Errorf("route to host %s: %w", hostID, ErrHostNotConnected)
	}
	base, err := url.Parse(addr)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("route to host %s: replica %s has bad address %q", hostID, replicaID, addr)
	}
	return &peerRoundTripper{r: r, hostID: hostID, replicaID: replicaID, base: base}, nil
}

type peerRoundTripper struct {
	r         *Router
	hostID    domain.HostID
	replicaID string
	base      *url.URL
}

func (p *peerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	prefix := strings.TrimSuffix(p.base.Path, "/") + PathPeerPrefix + url.PathEscape(string(p.hostID)) + "/link"
	out.URL = &url.URL{
		Scheme:   p.base.Scheme,
		Host:     p.base.Host,
		Path:     prefix + req.URL.Path,
		RawPath:  prefix + req.URL.EscapedPath(),
		RawQuery: req.URL.RawQuery,
	}
	out.Host = ""
	out.Header.Set(HeaderClusterSecret, p.r.cfg.ClusterSecret)
	resp, err := p.r.peer.RoundTrip(out)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// The replica that held the host is gone: the host is not
		// connected until it links again (to any replica).
		return nil, fmt.Errorf("forward %s %s for host %s to replica %s: %w: %w", req.Method, req.URL.Path, p.hostID, p.replicaID,
			ErrHostNotConnected, err)
	}
	if err != nil {
		return nil, fmt.Errorf("forward %s %s for host %s to replica %s: %w", req.Method, req.URL.Path, p.hostID, p.replicaID, err)
	}
	switch resp.Header.Get(HeaderLinkError) {
	case CodeHostNotConnected:
		_ = resp.Body.Close()
		return nil, fmt.Errorf("forward %s %s to replica %s: %w", req.Method, req.URL.Path, p.replicaID, ErrHostNotConnected)
	case CodeUnauthorized:
		_ = resp.Body.Close()
		return nil, fmt.Errorf("forward %s %s to replica %s: cluster secret refused", req.Method, req.URL.Path, p.replicaID)
	}
	return resp, nil
}

// LinkHeld reports whether replica replicaID (reached at addr) holds link
// linkID of hostID and that link is live (Server.Holds); an error when it
// cannot tell (the replica does not answer, or answers something else).
func (r *Router) LinkHeld(ctx context.Context, hostID domain.HostID, linkID, replicaID, addr string) (bool, error) {
	if replicaID == r.cfg.ReplicaID {
		return r.deps.Local != nil && r.deps.Local.Holds(hostID, linkID), nil
	}
	base, err := url.Parse(addr)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return false, fmt.Errorf("ask replica %s about host %s: bad address %q", replicaID, hostID, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	path := strings.TrimSuffix(base.Path, "/") + PathPeerPrefix + url.PathEscape(string(hostID)) + peerHeld + url.PathEscape(linkID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.Scheme+"://"+base.Host+path, nil)
	if err != nil {
		return false, fmt.Errorf("ask replica %s about host %s: %w", replicaID, hostID, err)
	}
	req.Header.Set(HeaderClusterSecret, r.cfg.ClusterSecret)
	resp, err := r.peer.RoundTrip(req)
	if err != nil {
		return false, fmt.Errorf("ask replica %s about host %s: %w", replicaID, hostID, err)
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent:
		return true, nil
	case resp.StatusCode == http.StatusNotFound && resp.Header.Get(HeaderLinkError) == CodeHostNotConnected:
		return false, nil
	}
	return false, fmt.Errorf("ask replica %s about host %s: %s", replicaID, hostID, resp.Status)
}

// Links lists the links this replica holds.
func (r *Router) Links() []LinkInfo {
	if r.deps.Local == nil {
		return nil
	}
	return r.deps.Local.Links()
}

// CloseLink ends this replica's link linkID of hostID (Server.CloseLink).
func (r *Router) CloseLink(hostID domain.HostID, linkID string) bool {
	return r.deps.Local != nil && r.deps.Local.CloseLink(hostID, linkID)
}

// peerHeld follows the host id in PathPeerPrefix for LinkHeld: GET
// PathPeerPrefix + {host_id} + peerHeld + {link_id} answers 204 when this
// replica holds that live link, 404 (HeaderLinkError host_not_connected)
// when not.
const peerHeld = "/held/"

// PeerHandler serves requests other replicas forward for hosts linked to
// this one; mount it at PathPeerPrefix.
func (r *Router) PeerHandler() http.Handler { return http.HandlerFunc(r.servePeer) }

func (r *Router) servePeer(w http.ResponseWriter, req *http.Request) {
	got := req.Header.Get(HeaderClusterSecret)
	if r.cfg.ClusterSecret == "" || subtle.ConstantTimeCompare([]byte(got), []byte(r.cfg.ClusterSecret)) != 1 {
		r.log.Warn("peer request refused: bad cluster secret", "remote_addr", req.RemoteAddr)
		w.Header().Set(HeaderLinkError, CodeUnauthorized)
		WriteError(w, http.StatusUnauthorized, CodeUnauthorized, "bad cluster secret")
		return
	}
	if hostID, linkID, ok := splitHeldPath(req); ok {
		if r.deps.Local != nil && r.deps.Local.Holds(hostID, linkID) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set(HeaderLinkError, CodeHostNotConnected)
		WriteError(w, http.StatusNotFound, CodeHostNotConnected, fmt.Sprintf("replica %s holds no live link %s of host %s", r.cfg.ReplicaID, linkID, hostID))
		return
	}
	hostID, rest, restRaw, ok := splitPeerPath(req.URL)
	if !ok {
		WriteError(w, http.StatusNotFound, "not_found", "expected "+PathPeerPrefix+"{host_id}/link/...")
		return
	}
	var rt http.RoundTripper
	if r.deps.Local != nil {
		rt, ok = r.deps.Local.Transport(hostID)
	}
	if !ok {
		w.Header().Set(HeaderLinkError, CodeHostNotConnected)
		WriteError(w, http.StatusServiceUnavailable, CodeHostNotConnected, fmt.Sprintf("host %s is not connected to replica %s", hostID, r.cfg.ReplicaID))
		return
	}
	log := r.log.With("host_id", hostID)
	// Bodies may stream both ways at once (exec, logs).
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = linkHost
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = restRaw
			pr.Out.Header.Del(HeaderClusterSecret)
		},
		Transport:     rt,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if errors.Is(err, ErrHostNotConnected) {
				w.Header().Set(HeaderLinkError, CodeHostNotConnected)
				WriteError(w, http.StatusServiceUnavailable, CodeHostNotConnected, err.Error())
				return
			}
			log.Info("forward over hostlink failed", "error", err)
			WriteError(w, http.StatusBadGateway, CodeBadGateway, err.Error())
		},
	}
	proxy.ServeHTTP(w, req)
}

// splitPeerPath splits PathPeerPrefix + {host_id} + "/link" + rest.
func splitPeerPath(u *url.URL) (hostID domain.HostID, rest, restRaw string, ok bool) {
	raw, ok := strings.CutPrefix(u.EscapedPath(), PathPeerPrefix)
	if !ok {
		return "", "", "", false
	}
	escID, restRaw, ok := strings.Cut(raw, "/link")
	if !ok || escID == "" || strings.Contains(escID, "/") {
		return "", "", "", false
	}
	if restRaw == "" {
		restRaw = "/"
	}
	if !strings.HasPrefix(restRaw, "/") {
		return "", "", "", false
	}
	id, err := url.PathUnescape(escID)
	if err != nil {
		return "", "", "", false
	}
	hostID = domain.HostID(id)
	rest, err = url.PathUnescape(restRaw)
	if err != nil {
		return "", "", "", false
	}
	return hostID, rest, restRaw, true
}

// splitHeldPath splits GET PathPeerPrefix + {host_id} + peerHeld + {link_id}.
func splitHeldPath(req *http.Request) (domain.HostID, string, bool) {
	raw, ok := strings.CutPrefix(req.URL.EscapedPath(), PathPeerPrefix)
	if !ok || req.Method != http.MethodGet {
		return "", "", false
	}
	escHost, escLink, ok := strings.Cut(raw, peerHeld)
	if !ok || escHost == "" || escLink == "" || strings.Contains(escHost, "/") || strings.Contains(escLink, "/") {
		return "", "", false
	}
	host, err1 := url.PathUnescape(escHost)
	link, err2 := url.PathUnescape(escLink)
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return domain.HostID(host), link, true
}
