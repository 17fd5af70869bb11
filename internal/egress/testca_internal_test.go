package egress

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/testutil"
)

var (
	caOnce sync.Once
	ca     *testutil.CA
)

// theCA is the tests' CA, made once.
func theCA(t testing.TB) *testutil.CA {
	t.Helper()
	caOnce.Do(func() { ca = testutil.NewCA(t) })
	return ca
}

// tlsUpstream is an HTTPS server on 127.0.0.1 with a certificate for
// names from the test CA.
func tlsUpstream(t testing.TB, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	return theCA(t).TLSServer(t, h, names...)
}

// clientTLS verifies servers against the test CA only.
func clientTLS(t testing.TB) *tls.Config {
	return &tls.Config{RootCAs: theCA(t).Pool}
}

// hostOf is a test server's 127.0.0.1:port.
func hostOf(s *httptest.Server) string {
	return s.Listener.Addr().(*net.TCPAddr).String()
}
