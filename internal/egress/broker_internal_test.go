package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBroker brokers git.test:443, sending its connections to to.
type fakeBroker struct {
	to    string
	mu    sync.Mutex
	dials []string
}

func (b *fakeBroker) Brokers(host string, port uint16) bool { return host == "git.test" && port == 443 }

func (b *fakeBroker) Dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	b.mu.Lock()
	b.dials = append(b.dials, host)
	b.mu.Unlock()
	return (&net.Dialer{}).DialContext(ctx, "tcp", b.to)
}

func (b *fakeBroker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dials)
}

// TestProxyHandsBrokeredTLSToTheBroker: TLS to a brokered host, transparent
// or through CONNECT, goes to the broker, never dialled by the proxy;
// plain HTTP through a CONNECT to it is refused.
func TestProxyHandsBrokeredTLSToTheBroker(t *testing.T) {
	t.Parallel()
	up := tlsUpstream(t, http.HandlerFunc(hello), "git.test")
	b := &fakeBroker{to: hostOf(up)}
	tp := newBrokeringProxy(t, ProxyConfig{}, map[string][]uint16{"git.test": {443, 80}}, map[string]string{}, b)
	if code, body, err := get(t, tp.transparentClient(t), "https://git.test/repo.git"); err != nil || code != 200 || body != "hello git.test /repo.git" {
		t.Fatalf("transparent: %d %q %v", code, body, err)
	}
	c := tp.explicitClient(t)
	if code, body, err := get(t, c, "https://git.test/c"); err != nil || code != 200 || body != "hello git.test /c" {
		t.Fatalf("CONNECT: %d %q %v", code, body, err)
	}
	c.CloseIdleConnections()
	if n := b.count(); n != 2 {
		t.Errorf("the broker got %d connections, want 2", n)
	}
	if d := tp.dialer.dials(); len(d) != 0 {
		t.Errorf("the proxy dialled %q itself", d)
	}
	tp.rec.waitFor(t, "a brokered event", func(ev Event) bool {
		return ev.Verdict == Allow && ev.Host == "git.test" && strings.Contains(ev.Reason, "brokered")
	})
	raw, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(raw, "CONNECT git.test:443 HTTP/1.1\r\nHost: git.test:443\r\n\r\n")
	br := bufio.NewReader(raw)
	var codes []int
	for _, method := range []string{http.MethodConnect, http.MethodGet} {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			break
		}
		codes = append(codes, resp.StatusCode)
		fmt.Fprintf(raw, "GET / HTTP/1.1\r\nHost: git.test:443\r\n\r\n")
	}
	if !slices.Equal(codes, []int{200, 403}) || b.count() != 2 {
		t.Errorf("plain HTTP in a CONNECT to a brokered host: %v (broker dialled %d times), want 200 then 403", codes, b.count())
	}
}

// TestProxyRefusesPlaceholdersInPlainHTTP: a placeholder sent in the clear
// (a header, the target, a Basic authorization) never leaves the proxy.
func TestProxyRefusesPlaceholdersInPlainHTTP(t *testing.T) {
	t.Parallel()
	up, addr := newPlainUpstream(t)
	tp := newTestProxy(t, ProxyConfig{PlaceholderPrefix: "engrams-ph-"}, map[string][]uint16{"allowed.test": {80}},
		map[string]string{"allowed.test:80": addr})
	tp.setOrig("10.0.0.5:80")
	ph := "engrams-ph-abc123"
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + ph))
	for _, tt := range []struct{ name, req string }{
		{"a bearer header", "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer " + ph + "\r\n\r\n"},
		{"Basic", "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Basic " + basic + "\r\n\r\n"},
		{"the query", "GET /?t=" + ph + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"a second request", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n\x00GET / HTTP/1.1\r\nHost: allowed.test\r\nX-T: " + ph + "\r\n\r\n"},
	} {
		codes, bodies, closed := rawHTTP(t, tp.addr, strings.Split(tt.req, "\x00")...)
		if len(codes) == 0 || codes[len(codes)-1] != http.StatusForbidden || !strings.Contains(bodies[len(bodies)-1], "placeholder") || !closed {
			t.Errorf("%s: %v %q closed=%v, want 403 naming the placeholder, then closed", tt.name, codes, bodies, closed)
		}
	}
	for _, r := range up.requests() {
		if strings.Contains(r, ph) || strings.Contains(r, basic) {
			t.Errorf("the upstream got a placeholder: %q", r)
		}
	}
}
