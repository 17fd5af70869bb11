package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// testCA is a certificate authority for the tests' TLS upstreams.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var (
	caOnce sync.Once
	ca     *testCA
	caErr  error
)

// theCA is the tests' CA, made once.
func theCA(t testing.TB) *testCA {
	t.Helper()
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			caErr = err
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "engrams egress test CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			caErr = err
			return
		}
		cert, _ := x509.ParseCertificate(der)
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		ca = &testCA{cert: cert, key: key, pool: pool}
	})
	if caErr != nil {
		t.Fatal(caErr)
	}
	return ca
}

// leaf is a server certificate for names, signed by the CA.
func (c *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsUpstream is an HTTPS server on 127.0.0.1 with a certificate for
// names from the test CA.
func tlsUpstream(t testing.TB, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{theCA(t).leaf(t, names...)}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// clientTLS verifies servers against the test CA only.
func clientTLS(t testing.TB) *tls.Config {
	return &tls.Config{RootCAs: theCA(t).pool}
}

// hostOf is a test server's 127.0.0.1:port.
func hostOf(s *httptest.Server) string {
	return s.Listener.Addr().(*net.TCPAddr).String()
}
