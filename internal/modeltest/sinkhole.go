package modeltest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
)

// Sinkhole is an HTTP proxy on 127.0.0.1 that refuses every request and
// records the host it was for. Pointing a CLI's HTTPS_PROXY, HTTP_PROXY and
// ALL_PROXY at it (with NO_PROXY naming 127.0.0.1 and localhost) turns each
// attempt to reach an outside host into a quick refusal that a test can
// list, instead of traffic. It sees only clients that honour the proxy
// variables; see ProxyEnv.
type Sinkhole struct {
	ts    *httptest.Server
	mu    sync.Mutex
	hosts map[string]int
}

// StartSinkhole serves a sinkhole until the test ends.
func StartSinkhole(t testing.TB) *Sinkhole {
	t.Helper()
	s := &Sinkhole{hosts: map[string]int{}}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *Sinkhole) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if r.Method != http.MethodConnect && r.URL.Host != "" {
		host = r.URL.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	s.mu.Lock()
	s.hosts[host]++
	s.mu.Unlock()
	http.Error(w, "modeltest sinkhole: outside hosts are blocked", http.StatusForbidden)
}

// URL is the proxy's URL.
func (s *Sinkhole) URL() string { return s.ts.URL }

// Hosts is each host a client tried to reach, sorted, with its count.
func (s *Sinkhole) Hosts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.hosts))
	for h, n := range s.hosts {
		out[h] = n
	}
	return out
}

// HostNames is the sorted names of Hosts.
func (s *Sinkhole) HostNames() []string {
	var out []string
	for h := range s.Hosts() {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// ProxyEnv is the environment that sends a CLI's outside traffic to the
// sinkhole while 127.0.0.1 and localhost stay direct.
func (s *Sinkhole) ProxyEnv() []string {
	u := s.URL()
	return []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u,
		"HTTP_PROXY=" + u, "http_proxy=" + u,
		"ALL_PROXY=" + u, "all_proxy=" + u,
		"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1",
	}
}
