package broker

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
)

// errTooLarge: a decoded answer went past Config.MaxDecodedBytes.
var errTooLarge = errors.New("the decoded answer is over the broker's bound")

// forward sends r to c's host over verified TLS, with auth as its
// Authorization ("": none), and streams the answer back scrubbed by sc:
// hop-by-hop headers, Set-Cookie and trailers dropped, every other header
// and the body with each form of the credential replaced by the
// placeholder. Upstream answers are asked for in identity encoding; a gzip
// or deflate one is decoded to be scrubbed, any other refused (502).
func (b *Broker) forward(w http.ResponseWriter, r *http.Request, c *conn, auth string, sc *scrubber, reason string) {
	host := c.name
	if c.port != 443 {
		host = net.JoinHostPort(c.name, strconv.Itoa(int(c.port)))
	}
	fail := func(msg string) {
		b.record(r.Context(), c, denyEvent(msg))
		w.Header().Set("Connection", "close")
		http.Error(w, "engrams credential broker: "+msg, http.StatusBadGateway)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "https://"+net.JoinHostPort(c.name, strconv.Itoa(int(c.port)))+r.RequestURI, nil)
	if err != nil {
		fail("the request's target cannot be sent on")
		return
	}
	out.Host = host
	out.Header = requestHeader(r.Header)
	out.Header.Set("Accept-Encoding", "identity")
	if auth != "" {
		out.Header.Set("Authorization", auth)
	}
	if r.ContentLength != 0 {
		out.Body, out.ContentLength = r.Body, r.ContentLength
	}
	resp, err := b.upstream.RoundTrip(out)
	if err != nil {
		c.log.Warn("broker: upstream", "err", err)
		fail(upstreamFailure(err, host))
		return
	}
	defer resp.Body.Close()
	body, err := b.decoded(resp)
	if err != nil {
		fail(err.Error())
		return
	}
	copyResponseHeader(w.Header(), resp.Header, sc)
	w.WriteHeader(resp.StatusCode)
	b.record(r.Context(), c, allowEvent(fmt.Sprintf("%s; upstream answered %d", reason, resp.StatusCode)))
	if r.Method == http.MethodHead {
		return
	}
	if err := copyScrubbed(w, body, sc); err != nil {
		c.log.Warn("broker: upstream answer cut short", "err", err)
		panic(http.ErrAbortHandler) // the guest sees the answer end early, never a whole one
	}
}

// requestHeader is what of the guest's header goes upstream: all but the
// hop-by-hop fields (and those Connection names), Authorization and
// Proxy-Authorization.
func requestHeader(in http.Header) http.Header {
	out := make(http.Header, len(in))
	for k, vv := range in {
		if hopByHop(k) || named(in, k) || k == "Authorization" {
			continue
		}
		out[k] = append([]string(nil), vv...)
	}
	return out
}

// copyResponseHeader copies an upstream's answer header to dst scrubbed:
// without hop-by-hop fields, Set-Cookie, Set-Cookie2, Content-Length (the
// body may change length: it goes chunked) and Content-Encoding (the body
// goes decoded), and without any field whose name holds the credential.
func copyResponseHeader(dst, src http.Header, sc *scrubber) {
	for k, vv := range src {
		switch {
		case hopByHop(k) || named(src, k) || sc.Contains(k):
			continue
		case k == "Set-Cookie" || k == "Set-Cookie2" || k == "Content-Length" || k == "Content-Encoding":
			continue
		}
		for _, v := range vv {
			dst.Add(k, sc.String(v))
		}
	}
}

// hopByHop names the fields of one connection, never forwarded.
func hopByHop(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// named reports whether h's Connection field names k.
func named(h http.Header, k string) bool {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)) == k {
				return true
			}
		}
	}
	return false
}

// decoded is resp's body as the guest gets it: as sent, or decoded from
// gzip or deflate (at most MaxDecodedBytes). A switch of protocols, or
// any other or several encodings, is refused.
func (b *Broker) decoded(resp *http.Response) (io.Reader, error) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil, errors.New("the upstream switched protocols, which the broker does not pass on")
	}
	encs := resp.Header.Values("Content-Encoding")
	if len(encs) == 0 {
		return resp.Body, nil
	}
	if len(encs) > 1 || strings.Contains(encs[0], ",") {
		return nil, errors.New("the upstream's answer has more than one content encoding")
	}
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encs[0])) {
	case "identity", "":
		return resp.Body, nil
	case "gzip", "x-gzip":
		z, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, errors.New("the upstream's gzip answer does not decode")
		}
		r = z
	case "deflate":
		br := bufio.NewReader(resp.Body)
		if head, err := br.Peek(2); err == nil && head[0]&0x0f == 8 && (int(head[0])<<8|int(head[1]))%31 == 0 {
			z, err := zlib.NewReader(br)
			if err != nil {
				return nil, errors.New("the upstream's deflate answer does not decode")
			}
			r = z
		} else {
			r = flate.NewReader(br)
		}
	default:
		return nil, fmt.Errorf("the upstream answered in the content encoding %.40q, which the broker cannot check", encs[0])
	}
	return &boundedReader{r: r, left: b.cfg.MaxDecodedBytes}, nil
}

// boundedReader fails with errTooLarge past its bound.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (l *boundedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// copyScrubbed streams body to w through sc, flushing after each read
// (git's progress comes in small pieces).
func copyScrubbed(w http.ResponseWriter, body io.Reader, sc *scrubber) error {
	sw := sc.writer(w)
	flush := http.NewResponseController(w).Flush
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := sw.Write(buf[:n]); werr != nil {
				return werr
			}
			_ = flush()
		}
		if errors.Is(err, io.EOF) {
			return sw.Close()
		}
		if err != nil {
			return err
		}
	}
}

// upstreamFailure says why the upstream could not be reached.
func upstreamFailure(err error, host string) string {
	var verr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verr):
		return fmt.Sprintf("%s's TLS certificate is not valid for it (not sent: the request and its credential)", host)
	case errors.Is(err, netpolicy.ErrBlocked):
		return fmt.Sprintf("%s is at an address this server does not reach (loopback, private or link-local)", host)
	}
	return fmt.Sprintf("could not reach %s", host)
}

func denyEvent(reason string) hostlink.EgressEvent {
	return hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressDeny, Reason: reason}
}

func allowEvent(reason string) hostlink.EgressEvent {
	return hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressAllow, Reason: reason}
}
