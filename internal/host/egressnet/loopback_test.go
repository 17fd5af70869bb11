package egressnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
)

// sink keeps what a path records.
type sink struct {
	mu  sync.Mutex
	evs []hostlink.EgressEvent
}

func (s *sink) Record(e hostlink.EgressEvent) { s.mu.Lock(); s.evs = append(s.evs, e); s.mu.Unlock() }
func (s *sink) Lost(int64)                    {}
func (s *sink) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// TestProxyOnlyServesTheAllowlist: the process backend's proxy, reached
// through the variables it sets, serves the allowlist and refuses the rest.
func TestProxyOnlyServesTheAllowlist(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello ", r.URL.Path) }))
	t.Cleanup(up.Close)
	hostPort := strings.TrimPrefix(up.URL, "http://")
	allow, err := netpolicy.ParseAllowances([]string{hostPort})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(hostPort)
	paths := New(Config{Guard: netpolicy.GuardConfig{Allow: allow, Resolver: loopbackNames{}}}, Deps{})
	s := &sink{}
	po, err := paths.MakeProxyOnly(t.Context(), "s1", Machine{Allow: []string{"allowed.test:" + port}, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	env := po.ProxyEnv()
	if po.TapFile() != nil || env["HTTP_PROXY"] == "" || env["HTTP_PROXY"] != env["https_proxy"] || !strings.Contains(env["NO_PROXY"], "127.0.0.1") {
		t.Fatalf("env %v", env)
	}
	pu, _ := url.Parse(env["HTTP_PROXY"])
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	get := func(u string) (int, string) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://allowed.test:" + port + "/x"); code != 200 || body != "hello /x" {
		t.Errorf("allowed: %d %q", code, body)
	}
	if code, _ := get("http://other.test:" + port + "/"); code != http.StatusForbidden {
		t.Errorf("off the list: %d, want 403", code)
	}
	if err := po.Close(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.evs) < 2 {
		t.Errorf("events %+v, want the allowed request and the refusal", s.evs)
	}
	if none, err := paths.MakeProxyOnly(t.Context(), "s2", Machine{Sink: s}); none != nil || err != nil {
		t.Errorf("no allowlist: %v %v, want no path", none, err)
	}
}

// loopbackNames resolves every name to 127.0.0.1.
type loopbackNames struct{}

func (loopbackNames) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}
