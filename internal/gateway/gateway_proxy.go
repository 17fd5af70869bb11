package gateway

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
)

// Bounds of one gateway request.
const (
	gatewayMaxBody              = 32 << 20 // request body
	defaultGatewayHeaderTimeout = 10 * time.Minute
)

// RouteHostLink adds the model gateway to the host-link mux
// (hostlink.PathGateway).
func (c *Gateway) RouteHostLink(mux *http.ServeMux) {
	mux.HandleFunc(hostlink.PathGateway+"{id}/{kind}/{rest...}", c.handleGateway)
	mux.HandleFunc(hostlink.PathGateway+"{id}/{kind}", c.handleGateway) // the base URL itself (probes)
}

// handleGateway serves one request a guest process sent to its gateway:
// the session must run on the sending host in a live state and grant the
// kind, the request must carry the session's placeholder; the placeholder
// is replaced by the real key and the request forwarded upstream, the
// answer streamed back as it comes.
func (c *Gateway) handleGateway(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	hostID, _ := hostlink.HostIDFrom(r.Context())
	sid, kind, rest := domain.SessionID(r.PathValue("id")), r.PathValue("kind"), r.PathValue("rest")
	log := c.log.With("session_id", sid, "kind", kind, "host_id", hostID)
	sw := &gatewayWriter{ResponseWriter: w}
	upstream, err := c.serveGateway(sw, r, hostID, sid, kind, rest, log)
	var refused *gatewayRefusal
	switch {
	case errors.As(err, &refused):
		writeGatewayError(sw, kind, refused.status, refused.msg)
	case err != nil: // the detail (ids, store errors) is logged below, never answered
		writeGatewayError(sw, kind, http.StatusInternalServerError, "the model gateway failed; the coordinator's log says why")
	}
	attrs := []any{"method", r.Method, "path", "/" + rest, "status", sw.status, "duration_ms", time.Since(start).Milliseconds()}
	if upstream != "" {
		attrs = append(attrs, "upstream", upstream)
	}
	switch {
	case refused != nil:
		attrs = append(attrs, "reason", refused.msg)
		if refused.cause != nil {
			attrs = append(attrs, "err", refused.cause)
		}
		log.Warn("gateway request refused", attrs...)
	case err != nil:
		log.Error("gateway request failed", append(attrs, "err", err)...)
	default:
		log.Info("gateway request", attrs...)
	}
}

// serveGateway checks and forwards one request; it answers only when it
// returns nil. upstream is the upstream host, once known.
func (c *Gateway) serveGateway(w http.ResponseWriter, r *http.Request, hostID domain.HostID, sid domain.SessionID, kind, rest string, log *slog.Logger) (upstream string, err error) {
	ctx := r.Context()
	if hostID == "" {
		return "", refuse(http.StatusUnauthorized, "gateway requests come from hosts over their link")
	}
	if !cleanRest(rest) {
		return "", refuse(http.StatusBadRequest, "bad gateway path %q", "/"+rest)
	}
	grant, err := c.gatewayGrant(ctx, hostID, sid, kind)
	if err != nil {
		return "", err
	}
	if !providerEndpoint(kind, r.Method, rest) {
		return "", refuse(http.StatusForbidden, "the model gateway does not forward %.16s /%.200s: it forwards only the %s endpoints harnesses call (%s)",
			r.Method, rest, kind, endpointList(kind))
	}
	presented, header := presentedCredential(r.Header)
	// A client probing the base URL itself (claude does after a failure,
	// without a key) is forwarded without one.
	probe := presented == "" && rest == "" && (r.Method == http.MethodHead || r.Method == http.MethodGet)
	if !probe {
		want, err := c.Placeholder(ctx, sid, kind)
		if err != nil {
			return "", err
		}
		if subtle.ConstantTimeCompare([]byte(presented), []byte(want)) != 1 {
			return "", refuse(http.StatusUnauthorized, "invalid API key: the model gateway accepts only this session's %s placeholder", kind)
		}
	}
	key, base, err := c.gatewaySecret(ctx, grant)
	if err != nil {
		return "", err
	}
	if err := c.checkProvider(base); err != nil {
		return base.Host, &gatewayRefusal{status: http.StatusForbidden, msg: blockedProvider, cause: err}
	}
	if probe {
		key, header = "", ""
	}
	if r.ContentLength > gatewayMaxBody {
		return base.Host, refuse(http.StatusRequestEntityTooLarge, "request body of %d bytes: the model gateway takes at most %d", r.ContentLength, gatewayMaxBody)
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, gatewayMaxBody)
	}
	c.gatewayProxy(kind, base, rest, header, key, log).ServeHTTP(w, r)
	return base.Host, nil
}

// cleanRest refuses dot segments, so a request cannot climb above the
// base URL's path.
func cleanRest(rest string) bool {
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// presentedCredential is the key a client sent and where: x-api-key
// (Anthropic), else an Authorization bearer token (OpenAI).
func presentedCredential(h http.Header) (key, header string) {
	if k := h.Get("X-Api-Key"); k != "" {
		return k, "X-Api-Key"
	}
	a := h.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:]), "Authorization"
	}
	return "", ""
}

// gatewayProxy forwards to base + "/" + rest with key in header, flushing
// every write (server-sent events stream token by token).
func (c *Gateway) gatewayProxy(kind string, base *url.URL, rest, header, key string, log *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := *base
			u.Path = strings.TrimSuffix(base.Path, "/") + "/" + rest
			u.RawPath = ""
			u.RawQuery = pr.In.URL.RawQuery
			pr.Out.URL = &u
			pr.Out.Host = ""
			h := pr.Out.Header
			for name := range h {
				if strings.HasPrefix(strings.ToLower(name), "engrams-") {
					h.Del(name)
				}
			}
			h.Del("X-Api-Key")
			h.Del("Authorization")
			switch header {
			case "X-Api-Key":
				h.Set("X-Api-Key", key)
			case "Authorization":
				h.Set("Authorization", "Bearer "+key)
			}
		},
		Transport:     c.upstream,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
				resp.Header.Set("X-Should-Retry", "false") // a refused key stays refused
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				writeGatewayError(w, kind, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", gatewayMaxBody))
				return
			}
			log.Warn("gateway upstream failed", "upstream", base.Host, "error", err)
			status := http.StatusBadGateway
			if errors.Is(err, netpolicy.ErrBlocked) {
				status = http.StatusForbidden
			}
			writeGatewayError(w, kind, status, upstreamFailure(err))
		},
	}
}

// blockedProvider is the refusal of a base URL at an address the server
// does not reach (the address itself is only logged).
const blockedProvider = "the model provider's base URL is at an address this server does not reach (loopback, private or link-local); " +
	"an operator can allow it with engrams server --allow-model-url"

// upstreamFailure says why the provider could not be reached, in words
// that quote neither its address nor the transport's error (logged).
func upstreamFailure(err error) string {
	var tlsErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, netpolicy.ErrBlocked):
		return blockedProvider
	case errors.Is(err, errHeaderTimeout):
		return "the model provider sent no answer in time"
	case errors.As(err, &tlsErr):
		return "the model gateway could not verify the model provider's TLS certificate"
	}
	return "the model gateway could not reach the model provider"
}

// headerTimeout bounds the wait for an answer's headers only: a stream may
// then run as long as it flows.
type headerTimeout struct {
	rt http.RoundTripper
	d  time.Duration
}

var errHeaderTimeout = errors.New("upstream sent no answer in time")

func (h headerTimeout) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	timer := time.AfterFunc(h.d, func() { cancel(errHeaderTimeout) })
	resp, err := h.rt.RoundTrip(r.WithContext(ctx))
	if !timer.Stop() {
		if err == nil {
			_ = resp.Body.Close()
		}
		cancel(nil)
		return nil, fmt.Errorf("%w (%s)", errHeaderTimeout, h.d)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, nil // the body is the upgraded connection; it ends with the request
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// gatewayWriter records the status answered.
type gatewayWriter struct {
	http.ResponseWriter
	status int
}

func (w *gatewayWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gatewayWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *gatewayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeGatewayError answers in the provider's error shape, so the harness
// reports it like one of the provider's. Refusals (4xx) are final:
// x-should-retry false keeps Anthropic's clients from retrying them.
func writeGatewayError(w http.ResponseWriter, kind string, status int, msg string) {
	msg = "engrams model gateway: " + msg
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if status >= 400 && status < 500 {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(status)
	var body any
	if kind == apiv1.SecretOpenAIAPIKey {
		typ, code := "invalid_request_error", any(nil)
		switch {
		case status == http.StatusUnauthorized:
			code = "invalid_api_key"
		case status >= 500:
			typ = "server_error"
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
	} else {
		body = map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": msg}}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	}
	return "api_error"
}
