package hostlink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/yamux"
)

// DialConfig is what a host needs to link to the coordinator.
type DialConfig struct {
	// URL is the coordinator's base URL (http, https, ws or wss);
	// PathConnect is appended unless the URL already ends with it.
	URL   string
	Token string
	// Handler serves the requests the coordinator sends (machine API).
	Handler http.Handler
	Logger  *slog.Logger
	// HTTPClient performs the WebSocket handshake (TLS settings, proxies,
	// in-memory tests); nil = http.DefaultClient.
	HTTPClient        *http.Client
	KeepAliveInterval time.Duration // 0 = 15s
	WriteTimeout      time.Duration // 0 = 10s
}

// Conn is a host's link to the coordinator.
type Conn struct {
	hostID    string
	s         *session
	ws        *websocket.Conn
	cancel    context.CancelFunc
	client    *http.Client
	done      chan struct{}
	closeOnce sync.Once
}

// Dial links the host to the coordinator: one WebSocket carrying a yamux
// session, HTTP on its streams in both directions. ctx bounds the handshake
// only. Errors wrap ErrVersionMismatch, ErrUnauthorized (a refused token,
// a disabled or deleted host) or ErrAlreadyConnected (another agent's live
// link holds the host) when the coordinator refused the host for those
// reasons; the last two wrap a *Refusal (RetryAfter reads its wait).
func Dial(ctx context.Context, cfg DialConfig) (*Conn, error) {
	log := orDiscard(cfg.Logger)
	u, err := connectURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	hdr.Set(HeaderVersion, strconv.Itoa(Version))
	hdr.Set("Authorization", "Bearer "+cfg.Token)
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:      cfg.HTTPClient,
		HTTPHeader:      hdr,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if refused := refusal(u, resp); refused != nil {
			return nil, refused
		}
		return nil, fmt.Errorf("connect to %s: %w", u, err)
	}
	if msg, ok := checkCoordinatorVersion(resp.Header.Get(HeaderVersion)); !ok {
		_ = ws.Close(websocket.StatusPolicyViolation, "hostlink version mismatch")
		return nil, fmt.Errorf("connect to %s: %w: %s", u, ErrVersionMismatch, msg)
	}
	hostID := resp.Header.Get(HeaderHostID)
	log = log.With("host_id", hostID)

	linkCtx, cancel := context.WithCancel(context.Background())
	nc := websocket.NetConn(linkCtx, ws, websocket.MessageBinary)
	ys, err := yamux.Client(newFrameConn(nc), yamuxConfig(cfg.KeepAliveInterval, cfg.WriteTimeout, log))
	if err != nil {
		cancel()
		_ = ws.CloseNow()
		return nil, fmt.Errorf("start yamux session to %s: %w", u, err)
	}
	c := &Conn{
		hostID: hostID,
		s:      newSession(ys, cfg.Handler, linkCtx, "coordinator", ErrClosed, log),
		ws:     ws,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	c.client = &http.Client{Transport: c.s.roundTripper()}
	go func() {
		<-c.s.closed()
		c.shutdown()
		close(c.done)
	}()
	return c, nil
}

// HostID is who the coordinator says this host is.
func (c *Conn) HostID() string { return c.hostID }

// HTTPClient sends requests to the coordinator over new streams. Only the
// path and query of a request URL are used.
func (c *Conn) HTTPClient() *http.Client { return c.client }

// OpenStream opens a raw stream to the coordinator (for an upgrade such
// as DialBroker's).
func (c *Conn) OpenStream() (net.Conn, error) {
	st, err := c.s.sess.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open stream to the coordinator: %w", err)
	}
	return st, nil
}

// Done is closed once the link has ended and its goroutines have returned.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close ends the link and joins its goroutines.
func (c *Conn) Close() error {
	c.shutdown()
	<-c.done
	return nil
}

func (c *Conn) shutdown() {
	c.closeOnce.Do(func() {
		c.s.close()
		_ = c.ws.CloseNow()
		c.cancel()
	})
}

func connectURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("parse coordinator url %q: must be absolute (http, https, ws or wss)", base)
	}
	switch u.Scheme {
	case "http", "https", "ws", "wss":
	default:
		return "", fmt.Errorf("parse coordinator url %q: scheme %q is not http, https, ws or wss", base, u.Scheme)
	}
	if !strings.HasSuffix(u.Path, PathConnect) {
		u.Path = strings.TrimSuffix(u.Path, "/") + PathConnect
	}
	return u.String(), nil
}

// refusal turns a coordinator's refusal into an error of the right
// category, or nil when resp is no refusal.
func refusal(u string, resp *http.Response) error {
	if resp == nil {
		return nil
	}
	var body ErrorBody
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = json.Unmarshal(b, &body)
	}
	switch {
	case body.Code == "version_mismatch" || (resp.StatusCode == http.StatusBadRequest && resp.Header.Get(HeaderVersion) != "" &&
		resp.Header.Get(HeaderVersion) != strconv.Itoa(Version)):
		msg := body.Error
		if msg == "" {
			msg, _ = checkCoordinatorVersion(resp.Header.Get(HeaderVersion))
		}
		return fmt.Errorf("connect to %s: %w: %s", u, ErrVersionMismatch, msg)
	case resp.StatusCode == http.StatusUnauthorized:
		msg := body.Error
		if msg == "" {
			msg = resp.Status
		}
		return fmt.Errorf("connect to %s: %w: %s: check the host token", u, ErrUnauthorized, msg)
	}
	if r := RefusalOf(resp.StatusCode, resp.Header, body); r != nil {
		return fmt.Errorf("connect to %s: %w", u, r)
	}
	return nil
}

// checkCoordinatorVersion explains a coordinator's protocol version that
// differs from ours, and what to upgrade.
func checkCoordinatorVersion(v string) (string, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case v == "" || err != nil:
		return fmt.Sprintf("coordinator speaks hostlink protocol %q (header %s missing or invalid), this host speaks %d: upgrade the coordinator to a release that speaks protocol %d",
			v, HeaderVersion, Version, Version), false
	case n < Version:
		return fmt.Sprintf("coordinator speaks hostlink protocol %d, this host speaks %d: upgrade the coordinator to a release that speaks protocol %d (or run a host agent that speaks %d)",
			n, Version, Version, n), false
	case n > Version:
		return fmt.Sprintf("coordinator speaks hostlink protocol %d, this host speaks %d: upgrade the host agent to a release that speaks protocol %d",
			n, Version, n), false
	}
	return "", true
}
