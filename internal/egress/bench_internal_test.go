package egress

import (
	"context"
	"crypto/tls"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

const benchDownload = 16 << 20

// BenchmarkProxyHTTPSDownload downloads 16 MiB over HTTPS from one TLS
// upstream on 127.0.0.1, directly and through the proxy (transparent,
// SNI passthrough; the client verifies the upstream's certificate either
// way), each on a fresh connection; and measures the time to first byte
// of a small answer on a fresh connection (TLS handshake included), as
// the median and 95th percentile.
func BenchmarkProxyHTTPSDownload(b *testing.B) {
	payload := make([]byte, benchDownload)
	rng := rand.NewChaCha8([32]byte{})
	rng.Read(payload)
	up := tlsUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(payload)
			return
		}
		io.WriteString(w, "ok")
	}), "allowed.test")
	tp := newTestProxy(b, ProxyConfig{}, map[string][]uint16{"allowed.test": {443}},
		map[string]string{"allowed.test:443": hostOf(up)})
	for _, mode := range []struct{ name, addr string }{{"direct", hostOf(up)}, {"proxy", tp.addr}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: theCA(b).Pool}, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", mode.addr)
			}}
		c := &http.Client{Transport: tr}
		b.Run(mode.name+"/download", func(b *testing.B) {
			for b.Loop() {
				if n := fetch(b, c, "https://allowed.test/big"); n != benchDownload {
					b.Fatalf("downloaded %d bytes", n)
				}
			}
			b.ReportMetric(float64(benchDownload)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
		b.Run(mode.name+"/first-byte", func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				fetch(b, c, "https://allowed.test/small")
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*95/100].Microseconds()), "p95-µs")
		})
	}
}

func fetch(b *testing.B, c *http.Client, u string) int64 {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
