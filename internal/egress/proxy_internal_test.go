package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type testProxy struct {
	addr   string
	dialer *fakeDialer
	names  *fakeNames
	rec    *recorder
	mu     sync.Mutex
	orig   netip.AddrPort // what OriginalDst answers
}

// newTestProxy runs a proxy on 127.0.0.1 allowing names, whose Dialer
// sends routes' keys to their values.
func newTestProxy(t testing.TB, cfg ProxyConfig, names map[string][]uint16, routes map[string]string) *testProxy {
	t.Helper()
	return newBrokeringProxy(t, cfg, names, routes, nil)
}

// newBrokeringProxy is newTestProxy handing brokered TLS to b.
func newBrokeringProxy(t testing.TB, cfg ProxyConfig, names map[string][]uint16, routes map[string]string, b Broker) *testProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	events, rec := runEvents(t)
	tp := &testProxy{addr: ln.Addr().String(), dialer: &fakeDialer{routes: routes}, names: &fakeNames{allowed: names}, rec: rec,
		orig: netip.MustParseAddrPort("10.0.0.5:443")}
	p, err := NewProxy(cfg, ProxyDeps{Listener: ln, Names: tp.names, Dialer: tp.dialer, Events: events, Broker: b,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			return tp.orig, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	runBackground(t, p.Run)
	return tp
}

func (tp *testProxy) setOrig(ap string) {
	tp.mu.Lock()
	tp.orig = netip.MustParseAddrPort(ap)
	tp.mu.Unlock()
}

// transparentClient reaches every address through the proxy, as the
// namespace's redirect does; TLS is verified against the test CA.
func (tp *testProxy) transparentClient(t testing.TB) *http.Client {
	tr := &http.Transport{TLSClientConfig: clientTLS(t), DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", tp.addr)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// explicitClient uses the proxy as HTTP(S)_PROXY.
func (tp *testProxy) explicitClient(t *testing.T) *http.Client {
	u, _ := url.Parse("http://" + tp.addr)
	tr := &http.Transport{TLSClientConfig: clientTLS(t), Proxy: http.ProxyURL(u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
}

func get(t *testing.T, c *http.Client, u string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestProxyTLSPassthroughBySNI(t *testing.T) {
	t.Parallel()
	up := tlsUpstream(t, http.HandlerFunc(hello), "allowed.test")
	tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {443}},
		map[string]string{"allowed.test:443": hostOf(up)})
	c := tp.transparentClient(t)
	// Whatever address the guest dialled (a spoofed /etc/hosts, a DNS
	// answer it made up), the proxy dials the name.
	for _, orig := range []string{"10.0.0.5:443", "127.0.0.1:443", "169.254.169.254:443", "93.184.216.34:443"} {
		tp.setOrig(orig)
		code, body, err := get(t, c, "https://allowed.test/x")
		if err != nil || code != 200 || body != "hello allowed.test /x" {
			t.Fatalf("via %s: %d %q %v", orig, code, body, err)
		}
	}
	if got := tp.dialer.dials(); !slices.Equal(got, slices.Repeat([]string{"allowed.test:443"}, 4)) {
		t.Errorf("dialled %q, want allowed.test:443 by name each time", got)
	}
	ev := tp.rec.waitFor(t, "for the TLS connection", func(ev Event) bool { return ev.Kind == KindTLS })
	if ev.Verdict != Allow || ev.Host != "allowed.test" || ev.Port != 443 || ev.BytesUp == 0 || ev.BytesDown == 0 {
		t.Errorf("event %+v", ev)
	}
}

func TestProxyTLSRefusals(t *testing.T) {
	t.Parallel()
	up := tlsUpstream(t, http.HandlerFunc(hello), "allowed.test", "other.test")
	tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {443}},
		map[string]string{"allowed.test:443": hostOf(up), "other.test:443": hostOf(up), "allowed.test:8443": hostOf(up)})
	for _, tc := range []struct {
		name, sni, orig, reason string
	}{
		{"a name not allowed", "other.test", "10.0.0.5:443", "not in the allowlist"},
		{"an allowed name on another port", "allowed.test", "10.0.0.5:8443", "port 8443"},
		{"no SNI", "", "10.0.0.5:443", "without a server name"},
	} {
		tp.setOrig(tc.orig)
		cfg := clientTLS(t)
		cfg.ServerName = tc.sni
		cfg.InsecureSkipVerify = tc.sni == ""
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		err = tls.Client(c, cfg).Handshake()
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Errorf("%s: handshake %v, want an access_denied alert", tc.name, err)
		}
	}
	if got := tp.dialer.dials(); len(got) != 0 {
		t.Errorf("dialled %q for refused connections", got)
	}
	for _, reason := range []string{"not in the allowlist", "port 8443", "without a server name"} {
		ev := tp.rec.waitFor(t, reason, func(ev Event) bool { return strings.Contains(ev.Reason, reason) })
		if ev.Verdict != Deny || ev.Kind != KindTLS {
			t.Errorf("event %+v", ev)
		}
	}
}

func TestProxyCONNECT(t *testing.T) {
	t.Parallel()
	up := tlsUpstream(t, http.HandlerFunc(hello), "allowed.test", "other.test")
	tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {443}, "93.184.216.34": {443}},
		map[string]string{"allowed.test:443": hostOf(up), "other.test:443": hostOf(up), "93.184.216.34:443": hostOf(up)})
	c := tp.explicitClient(t)
	code, body, err := get(t, c, "https://allowed.test/c")
	if err != nil || code != 200 || body != "hello allowed.test /c" {
		t.Fatalf("CONNECT allowed.test: %d %q %v", code, body, err)
	}
	if _, _, err := get(t, c, "https://other.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT other.test: %v, want 403 Forbidden", err)
	}
	c.CloseIdleConnections() // the tunnel's event comes when it ends
	ev := tp.rec.waitFor(t, "for the tunnel", func(ev Event) bool { return ev.Kind == KindConnect && ev.Verdict == Allow })
	if ev.Host != "allowed.test" || ev.Port != 443 {
		t.Errorf("event %+v", ev)
	}

	// What goes through the tunnel must be TLS for the CONNECT host.
	for _, tc := range []struct {
		name, target, sni string
		ok                bool
		reason            string
	}{
		{"SNI of another host", "allowed.test:443", "other.test", false, "SNI other.test differs"},
		{"no SNI to a name", "allowed.test:443", "", false, "without a server name"},
		{"no SNI to an allowed IP literal", "93.184.216.34:443", "", true, ""},
	} {
		err := tunnel(t, tp.addr, tc.target, tc.sni)
		if tc.ok != (err == nil) || (!tc.ok && !strings.Contains(err.Error(), "access denied")) {
			t.Errorf("%s: handshake %v, want ok %v", tc.name, err, tc.ok)
		}
		if tc.reason != "" {
			tp.rec.waitFor(t, tc.reason, func(ev Event) bool {
				return ev.Kind == KindConnect && ev.Verdict == Deny && strings.Contains(ev.Reason, tc.reason)
			})
		}
	}
	if got := tp.dialer.dials(); slices.Contains(got, "other.test:443") {
		t.Errorf("dialled %q", got)
	}
}

// tunnel opens a CONNECT tunnel to target through the proxy at addr and
// runs a TLS handshake with sni through it (none: verification off).
func tunnel(t *testing.T, addr, target, sni string) error {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(raw, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	cfg := clientTLS(t)
	cfg.ServerName, cfg.InsecureSkipVerify = sni, sni == ""
	return tls.Client(&bufConn{raw, br}, cfg).Handshake()
}

// bufConn reads through a bufio.Reader that may hold what was read past
// an HTTP answer.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.br.Read(b) }

// plainUpstream is an HTTP server recording the requests it serves.
type plainUpstream struct {
	mu   sync.Mutex
	seen []string // "Host path body"
}

func (u *plainUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, fmt.Sprintf("%s %s %s %s", r.Method, r.Host, r.URL.Path, b))
	u.mu.Unlock()
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection"} {
		if r.Header.Get(h) != "" {
			w.Header().Set("Leaked", h)
		}
	}
	fmt.Fprintf(w, "ok %s", r.URL.Path)
}

func (u *plainUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

func newPlainUpstream(t *testing.T) (*plainUpstream, string) {
	t.Helper()
	u := &plainUpstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: u}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return u, ln.Addr().String()
}

// rawHTTP sends requests on one connection to the proxy and reads each
// answer; it stops at the first that fails.
func rawHTTP(t *testing.T, addr string, reqs ...string) (codes []int, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, req := range reqs {
		if _, err := io.WriteString(c, req); err != nil {
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes, bodies = append(codes, resp.StatusCode), append(bodies, string(b))
	}
	c.(*net.TCPConn).CloseWrite() // all sent: the proxy ends the connection once the upstream has answered
	_, err = br.ReadByte()
	return codes, bodies, errors.Is(err, io.EOF)
}

func TestProxyPlainHTTPChecksEveryRequest(t *testing.T) {
	t.Parallel()
	const (
		getA     = "GET /a HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
		postA    = "POST /p HTTP/1.1\r\nHost: Allowed.Test.\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: v\r\n\r\n"
		getOther = "GET /o HTTP/1.1\r\nHost: other.test\r\n\r\n"
	)
	for _, tc := range []struct {
		name   string
		reqs   []string
		codes  []int
		served []string
		denied string
	}{
		{"keep-alive on one host", []string{getA, postA, getA}, []int{200, 200, 200},
			[]string{"GET allowed.test /a ", "POST Allowed.Test. /p abcde", "GET allowed.test /a "}, ""},
		{"Host switched mid-connection", []string{getA, postA, getOther, getA}, []int{200, 200, 403},
			[]string{"GET allowed.test /a ", "POST Allowed.Test. /p abcde"}, "differs from allowed.test:80"},
		{"first Host not allowed", []string{getOther}, []int{403}, nil, "not in the allowlist"},
		{"Host port other than the one dialled", []string{"GET / HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"}, []int{403}, nil, "differs"},
		{"smuggling: Content-Length and chunked", []string{"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, []int{400}, nil, "Transfer-Encoding with Content-Length"},
		{"smuggling after an allowed request", []string{getA, "GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: other.test\r\n\r\n"}, []int{200, 400},
			[]string{"GET allowed.test /a "}, "repeated Host"},
		{"absolute-form to another host mid-connection", []string{getA, "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"}, []int{200, 400},
			[]string{"GET allowed.test /a "}, "want a /path request"},
		{"Upgrade", []string{"GET / HTTP/1.1\r\nHost: allowed.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"}, []int{403}, nil, "Upgrade"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, upAddr := newPlainUpstream(t)
			tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {80}},
				map[string]string{"allowed.test:80": upAddr, "other.test:80": upAddr})
			tp.setOrig("10.0.0.5:80")
			codes, bodies, closed := rawHTTP(t, tp.addr, tc.reqs...)
			if !slices.Equal(codes, tc.codes) {
				t.Errorf("answers %v, want %v", codes, tc.codes)
			}
			if last := len(bodies) - 1; tc.denied != "" && last >= 0 && !strings.Contains(bodies[last], tc.denied) {
				t.Errorf("refusal says %q, want it to name %q", bodies[last], tc.denied)
			}
			if got := up.requests(); !slices.Equal(got, tc.served) {
				t.Errorf("upstream served %q, want %q", got, tc.served)
			}
			if tc.denied != "" {
				if !closed {
					t.Error("the connection stayed open after a refusal")
				}
				tp.rec.waitFor(t, tc.denied, func(ev Event) bool { return ev.Verdict == Deny && strings.Contains(ev.Reason, tc.denied) })
			}
			for _, d := range tp.dialer.dials() {
				if d != "allowed.test:80" {
					t.Errorf("dialled %s", d)
				}
			}
		})
	}
}

func TestProxyAbsoluteForm(t *testing.T) {
	t.Parallel()
	up, upAddr := newPlainUpstream(t)
	tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {80, 8080}},
		map[string]string{"allowed.test:80": upAddr, "allowed.test:8080": upAddr, "other.test:80": upAddr})
	c := tp.explicitClient(t)
	for _, u := range []string{"http://allowed.test/x?q=1", "http://allowed.test:8080/y"} {
		code, body, err := get(t, c, u)
		if err != nil || code != 200 || !strings.HasPrefix(body, "ok /") {
			t.Errorf("GET %s: %d %q %v", u, code, body, err)
		}
	}
	if code, _, err := get(t, c, "http://other.test/"); err != nil || code != 403 {
		t.Errorf("GET other.test: %d %v, want 403", code, err)
	}
	want := []string{"GET allowed.test /x ", "GET allowed.test:8080 /y "}
	if got := up.requests(); !slices.Equal(got, want) {
		t.Errorf("upstream served %q, want %q", got, want)
	}
	codes, _, _ := rawHTTP(t, tp.addr, "GET http://allowed.test/z HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if !slices.Equal(codes, []int{403}) {
		t.Errorf("Host other than the URL's: answers %v, want 403", codes)
	}
}

func TestProxyLeaksNoProxyHeaders(t *testing.T) {
	t.Parallel()
	_, upAddr := newPlainUpstream(t)
	tp := newTestProxy(t, ProxyConfig{}, map[string][]uint16{"allowed.test": {80}}, map[string]string{"allowed.test:80": upAddr})
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET http://allowed.test/z HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Header.Get("Leaked"); l != "" || !resp.Close {
		t.Errorf("upstream saw %q; answer closes: %v (want the forwarded request to ask Connection: close)", l, resp.Close)
	}
}

func TestProxyBounds(t *testing.T) {
	t.Parallel()
	_, upAddr := newPlainUpstream(t)
	tp := newTestProxy(t, ProxyConfig{MaxConns: 2, PeekTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond},
		map[string][]uint16{"allowed.test": {80}}, map[string]string{"allowed.test:80": upAddr})
	tp.setOrig("10.0.0.5:80")

	big := "GET / HTTP/1.1\r\nHost: allowed.test\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 70) + "\r\n"
	if codes, _, closed := rawHTTP(t, tp.addr, big); !slices.Equal(codes, []int{400}) || !closed {
		t.Errorf("70 KB of headers: answers %v, closed %v; want 400 and closed", codes, closed)
	}
	tp.rec.waitFor(t, "for the head bound", func(ev Event) bool { return strings.Contains(ev.Reason, "over 64 KiB") })

	mustClose := func(what string, c net.Conn, within time.Duration) {
		t.Helper()
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if err != nil || time.Since(start) > within {
			t.Errorf("%s: closed after %v (%v), want within %v", what, time.Since(start), err, within)
		}
	}
	silent, _ := net.Dial("tcp", tp.addr)
	defer silent.Close()
	mustClose("a connection that says nothing", silent, 2*time.Second)

	idle, _ := net.Dial("tcp", tp.addr)
	defer idle.Close()
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	mustClose("an idle keep-alive connection", idle, 3*time.Second)

	a, _ := net.Dial("tcp", tp.addr)
	defer a.Close()
	b, _ := net.Dial("tcp", tp.addr)
	defer b.Close()
	// The listener accepts in order: a and b hold both slots when the third comes.
	third, _ := net.Dial("tcp", tp.addr)
	defer third.Close()
	mustClose("a third connection over the bound of 2", third, 100*time.Millisecond)
	tp.rec.waitFor(t, "for the connection bound", func(ev Event) bool { return strings.Contains(ev.Reason, "too many at once") })
}

// guardDialer stands in for netpolicy.Guard: it resolves the name
// itself, checks every address and dials only one that passes.
type guardDialer struct {
	up     *fakeUpstream
	port   map[netip.Addr]string // where a passing address really is (loopback here)
	mu     sync.Mutex
	dialed []string
}

func (g *guardDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	g.dialed = append(g.dialed, addr)
	g.mu.Unlock()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil, fmt.Errorf("guard: %s: an address, not a name", addr)
	}
	as, err := g.up.LookupNetIP(ctx, "ip4", host+".")
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		p, _ := parsePort(port)
		if (fakeAddrs{}).CheckAddr(netip.AddrPortFrom(a, p)) == nil {
			var d net.Dialer
			return d.DialContext(ctx, network, g.port[a])
		}
	}
	return nil, fmt.Errorf("guard: every address of %s is blocked", host)
}

// An allowed name whose DNS answers are loopback and private: the
// resolver answers none of them, and a guest that dials them anyway
// (its own /etc/hosts) reaches the proxy, which dials the name; the
// guard refuses it, and the loopback server behind those addresses
// never sees a connection.
func TestAllowedNameOnPrivateAddressesIsNeverReached(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{}, 16)
	up := httptest.NewUnstartedServer(http.HandlerFunc(hello))
	up.Config.ConnState = func(net.Conn, http.ConnState) { seen <- struct{}{} }
	up.TLS = &tls.Config{Certificates: []tls.Certificate{theCA(t).Leaf(t, "allowed.test")}}
	up.StartTLS()
	defer up.Close()
	td := newTestDNS(t, DNSConfig{})
	td.upstream.set("allowed.test.", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.5"))
	if r := td.exchange(t, "udp", "allowed.test.", 1, 1); len(r.Answer) != 0 {
		t.Fatalf("resolver answered %v", answers(r))
	}
	g := &guardDialer{up: td.upstream, port: map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): hostOf(up)}}
	p, err := NewProxy(ProxyConfig{}, ProxyDeps{Listener: mustListen(t), Names: td.names, Dialer: g,
		OriginalDst: func(net.Conn) (netip.AddrPort, error) { return netip.MustParseAddrPort("10.0.0.5:443"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	addr := p.ln.Addr().String()
	runBackground(t, p.Run)
	tr := &http.Transport{TLSClientConfig: clientTLS(t), DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}
	defer tr.CloseIdleConnections()
	if _, _, err := get(t, &http.Client{Transport: tr}, "https://allowed.test/"); err == nil {
		t.Fatal("reached an allowed name that resolves only to blocked addresses")
	}
	g.mu.Lock()
	dialed := slices.Clone(g.dialed)
	g.mu.Unlock()
	if !slices.Equal(dialed, []string{"allowed.test:443"}) {
		t.Errorf("dialled %q, want the name only", dialed)
	}
	select {
	case <-seen:
		t.Error("the loopback server behind the blocked address got a connection")
	default:
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
