package egress

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// refusal is a request the proxy answers itself, with status.
type refusal struct {
	status int
	host   string // what the request named, for the event
	reason string
}

func (r *refusal) Error() string { return r.reason }

// response is the refusal as an HTTP answer that closes the connection.
func (r *refusal) response() []byte {
	body := "egress: " + strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return '?'
		}
		return c
	}, clip(r.reason)) + "\n"
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		r.status, http.StatusText(r.status), len(body), body)
}

func badRequest(err error) *refusal {
	return &refusal{status: http.StatusBadRequest, reason: describe(err)}
}

// serveHTTP serves a connection that starts with an HTTP request:
// CONNECT, an absolute-form request (explicit proxy) or an origin-form
// one (transparent, by its Host on the port the guest dialled).
func (p *Proxy) serveHTTP(ctx context.Context, pc *proxyConn) {
	pc.ev.Kind = KindHTTP
	rh, raw, err := pc.readRequest()
	if err != nil {
		pc.ev.Kind = KindTCP
		if !errors.Is(err, io.EOF) {
			pc.refuseFirst(badRequest(err))
		}
		return
	}
	form, dest, _, err := rh.requestTarget()
	switch {
	case err != nil:
		pc.refuseFirst(badRequest(err))
	case form == authorityForm:
		p.serveConnect(ctx, pc, rh, dest)
	case form == absoluteForm:
		p.openHTTP(ctx, pc, rh, raw, &stream{want: dest, absolute: true, placeholder: p.cfg.PlaceholderPrefix})
	default:
		port, err := pc.origPort()
		if err != nil {
			pc.refuseFirst(&refusal{status: http.StatusBadRequest, reason: err.Error()})
			return
		}
		host, ok := parseAuthority(rh.host, port, false)
		if !ok {
			pc.refuseFirst(&refusal{status: http.StatusBadRequest, host: rh.host, reason: fmt.Sprintf("Host %.80q is not a host name", rh.host)})
			return
		}
		host.port = port // check holds the Host's own port to it
		p.openHTTP(ctx, pc, rh, raw, &stream{want: host, placeholder: p.cfg.PlaceholderPrefix})
	}
}

// readRequest reads and parses one request head, which must arrive
// within PeekTimeout. io.EOF: the guest ended the connection before it.
func (pc *proxyConn) readRequest() (*reqHead, []byte, error) {
	pc.client.hard = time.Now().Add(pc.p.cfg.PeekTimeout)
	defer func() { pc.client.hard = time.Time{} }()
	raw, err := readHead(pc.br)
	if err != nil {
		return nil, nil, err
	}
	rh, err := parseRequestHead(raw)
	return rh, raw, err
}

// openHTTP checks a plain HTTP connection's first request, dials its
// destination and forwards its requests, each checked.
func (p *Proxy) openHTTP(ctx context.Context, pc *proxyConn, rh *reqHead, raw []byte, s *stream) {
	pc.ev.Host, pc.ev.Port = s.want.named(), s.want.port
	fwd, ref := s.check(rh, raw)
	if ref != nil {
		pc.refuseFirst(ref)
		return
	}
	ok, why := p.names.AllowName(s.want.host, s.want.port)
	if !ok {
		pc.refuseFirst(&refusal{status: http.StatusForbidden, reason: why})
		return
	}
	if err := pc.dial(ctx, s.want); err != nil {
		pc.refuseFirst(&refusal{status: http.StatusBadGateway, reason: err.Error()})
		return
	}
	pc.allow(why)
	pc.splice(func() error { return pc.pumpHTTP(s, rh, fwd) })
}

// serveConnect opens a CONNECT tunnel to an allowed destination and
// checks what goes through it: TLS whose SNI is the CONNECT host (none
// only for an IP literal), or plain HTTP whose every Host is.
func (p *Proxy) serveConnect(ctx context.Context, pc *proxyConn, rh *reqHead, dest hostPort) {
	pc.ev.Kind, pc.ev.Host, pc.ev.Port = KindConnect, dest.named(), dest.port
	if rh.contentLength > 0 || rh.chunked {
		pc.refuseFirst(&refusal{status: http.StatusBadRequest, reason: "CONNECT with a body"})
		return
	}
	ok, why := p.names.AllowName(dest.host, dest.port)
	if !ok {
		pc.refuseFirst(&refusal{status: http.StatusForbidden, reason: why})
		return
	}
	brokered := p.brokered(dest)
	if !brokered {
		if err := pc.dial(ctx, dest); err != nil {
			pc.refuseFirst(&refusal{status: http.StatusBadGateway, reason: err.Error()})
			return
		}
	}
	pc.allow(why)
	if _, err := pc.client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		pc.ev.Reason = "answer CONNECT: " + describe(err)
		return
	}
	pc.client.hard = time.Now().Add(p.cfg.PeekTimeout)
	first, err := pc.br.Peek(1)
	if err != nil {
		pc.ev.Reason += "; nothing sent through the tunnel: " + describe(err)
		return
	}
	if first[0] == recordHandshake {
		hello, err := peekClientHello(pc.br)
		switch {
		case errors.Is(err, errNoSNI) && dest.ip:
		case err != nil:
			pc.denyTLS("in the tunnel: " + describe(err))
			return
		case hello.sni != dest.host:
			pc.denyTLS(fmt.Sprintf("in the tunnel: SNI %s differs from the CONNECT host %s", hello.sni, dest.host))
			return
		}
		pc.client.hard = time.Time{}
		if brokered {
			if err := pc.dialTLS(ctx, dest, &pc.ev.Reason); err != nil {
				pc.ev.Verdict, pc.ev.Reason = Deny, err.Error()
				pc.writeClient(tlsAlert(alertInternalError))
				return
			}
		}
		pc.splice(func() error { return copyRaw(countWriter{pc.up, &pc.upBytes}, pc.br) })
		return
	}
	if brokered {
		pc.refuseFirst(&refusal{status: http.StatusForbidden, host: dest.host,
			reason: fmt.Sprintf("%s is brokered: only TLS goes through a tunnel to it", dest)})
		return
	}
	s := &stream{want: dest, placeholder: p.cfg.PlaceholderPrefix}
	rh2, raw, err := pc.readRequest()
	var fwd []byte
	var ref *refusal
	if err == nil {
		fwd, ref = s.check(rh2, raw)
	} else {
		ref = badRequest(err)
	}
	if ref != nil {
		pc.refuseFirst(ref)
		return
	}
	pc.splice(func() error { return pc.pumpHTTP(s, rh2, fwd) })
}

// stream is what every request on a plain HTTP connection must name.
type stream struct {
	want hostPort
	// absolute: requests are absolute-form (explicit proxy), forwarded in
	// origin-form with "Connection: close", so a client that reuses its
	// proxy connection for another host opens a new one instead.
	absolute bool
	// placeholder is ProxyConfig.PlaceholderPrefix: a request carrying it
	// is refused.
	placeholder string
}

// check returns the head to forward for rh (raw as read), or why the
// request is refused.
func (s *stream) check(rh *reqHead, raw []byte) ([]byte, *refusal) {
	form, dest, path, err := rh.requestTarget()
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, host: rh.host, reason: err.Error()}
	}
	deny := func(status int, host, format string, args ...any) *refusal {
		return &refusal{status: status, host: host, reason: fmt.Sprintf(format, args...)}
	}
	if rh.upgrade {
		return nil, deny(http.StatusForbidden, rh.host, "Upgrade is not served over plain HTTP (use https)")
	}
	if carriesPlaceholder(s.placeholder, rh, raw) {
		return nil, deny(http.StatusForbidden, rh.host, "a credential placeholder in a request to %s, which it is not for: not substituted, connection closed", s.want)
	}
	if s.absolute {
		if form != absoluteForm {
			return nil, deny(http.StatusBadRequest, rh.host, "a %s request on a proxy connection wants an absolute http:// URL", rh.method)
		}
		if dest.host != s.want.host || dest.port != s.want.port {
			return nil, deny(http.StatusForbidden, dest.String(), "a request for %s on a connection to %s", dest, s.want)
		}
		if rh.host != "" {
			if h, ok := parseAuthority(rh.host, 80, false); !ok || h.host != dest.host || h.port != dest.port {
				return nil, deny(http.StatusForbidden, rh.host, "Host %.80q differs from the URL's %s", rh.host, dest)
			}
		}
		return rewriteAbsolute(rh, path, dest), nil
	}
	if form != originForm {
		return nil, deny(http.StatusBadRequest, rh.host, "want a /path request on a connection to %s", s.want)
	}
	if rh.host == "" {
		return nil, deny(http.StatusBadRequest, "", "a request without Host")
	}
	h, ok := parseAuthority(rh.host, s.want.port, false)
	if !ok || h.host != s.want.host || h.port != s.want.port {
		return nil, deny(http.StatusForbidden, rh.host, "Host %.80q differs from %s, which this connection was allowed for", rh.host, s.want)
	}
	return raw, nil
}

// hopHeaders are not forwarded from an absolute-form request.
var hopHeaders = map[string]bool{"host": true, "connection": true, "proxy-connection": true,
	"proxy-authorization": true, "keep-alive": true}

// rewriteAbsolute is rh in origin-form for dest: its path, Host the
// URL's authority, hop-by-hop headers dropped, "Connection: close".
func rewriteAbsolute(rh *reqHead, path string, dest hostPort) []byte {
	var b bytes.Buffer
	host := dest.host
	if dest.port != 80 || dest.ip && strings.Contains(host, ":") {
		host = dest.String()
	}
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", rh.method, path, rh.version, host)
	for _, h := range rh.headers {
		if !hopHeaders[strings.ToLower(h.name)] {
			fmt.Fprintf(&b, "%s: %s\r\n", h.name, h.value)
		}
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

// pumpHTTP forwards fwd (rh's head) and rh's body, then each later
// request on the connection once check passes it. nil: the guest ended
// the connection; a *refusal: a request was refused.
func (pc *proxyConn) pumpHTTP(s *stream, rh *reqHead, fwd []byte) error {
	w := countWriter{pc.up, &pc.upBytes}
	for {
		if _, err := w.Write(fwd); err != nil {
			return err
		}
		if err := copyBody(w, pc.br, rh); err != nil {
			if errors.Is(err, errBadRequest) {
				return badRequest(err)
			}
			return err
		}
		if _, err := pc.br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var raw []byte
		var err error
		if rh, raw, err = pc.readRequest(); err != nil {
			if errors.Is(err, errBadRequest) || errors.Is(err, errHeadTooLarge) {
				return badRequest(err)
			}
			return err
		}
		var ref *refusal
		if fwd, ref = s.check(rh, raw); ref != nil {
			return ref
		}
	}
}

// refuseFirst answers a refused first request and records the denial.
func (pc *proxyConn) refuseFirst(r *refusal) {
	pc.ev.Verdict, pc.ev.Reason = Deny, r.reason
	if pc.ev.Host == "" {
		pc.ev.Host = r.host
	}
	pc.writeClient(r.response())
}

// refuseLater answers a refused later request on an allowed connection:
// the denial is an event of its own.
func (pc *proxyConn) refuseLater(r *refusal) {
	pc.p.events.Emit(Event{Kind: pc.ev.Kind, Host: r.host, Port: pc.ev.Port, Verdict: Deny, Reason: r.reason})
	pc.ev.Reason += "; closed at a refused request"
	pc.writeClient(r.response())
}

// carriesPlaceholder reports whether a plain HTTP request head carries a
// credential placeholder: in the clear, or in a Basic authorization.
// Placeholders are substituted only by the credential broker, on their
// own hosts' TLS; sent anywhere else, the request is refused.
func carriesPlaceholder(prefix string, rh *reqHead, raw []byte) bool {
	if prefix == "" {
		return false
	}
	if bytes.Contains(raw, []byte(prefix)) {
		return true
	}
	for _, h := range rh.headers {
		name := strings.ToLower(h.name)
		if name != "authorization" && name != "proxy-authorization" {
			continue
		}
		scheme, cred, _ := strings.Cut(strings.TrimSpace(h.value), " ")
		if !strings.EqualFold(scheme, "basic") {
			continue
		}
		if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil && bytes.Contains(dec, []byte(prefix)) {
			return true
		}
	}
	return false
}
