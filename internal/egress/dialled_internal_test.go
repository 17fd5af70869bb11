package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestProxyRecordsWhatWasDialled: every connection's event says the
// address and port the guest dialled, whatever name it claimed, and the
// name as it sent it (case kept): raw TCP refused before it said anything
// useful, an HTTP request to the metadata address naming another host,
// TLS whose SNI is in mixed case.
func TestProxyRecordsWhatWasDialled(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(hello))
	t.Cleanup(up.Close)
	tlsUp := tlsUpstream(t, http.HandlerFunc(hello), "allowed.test")
	tp := newTestProxy(t, ProxyConfig{PeekTimeout: 200 * time.Millisecond}, map[string][]uint16{"allowed.test": {80, 443}},
		map[string]string{"allowed.test:80": hostOf(up), "allowed.test:443": hostOf(tlsUp)})
	send := func(orig, data string) string {
		t.Helper()
		tp.setOrig(orig)
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if data != "" {
			io.WriteString(c, data)
		}
		b, _ := io.ReadAll(c)
		return string(b)
	}
	// SSH to an unlisted port: its banner is no HTTP request.
	send("93.184.216.34:2222", "SSH-2.0-probe\r\n")
	// A client that says nothing until the proxy gives up.
	send("198.51.100.7:5432", "")
	// Plain HTTP to the metadata address, naming a host of its choice.
	if out := send("169.254.169.254:80", "GET /latest/meta-data/ HTTP/1.1\r\nHost: X.Example\r\n\r\n"); !strings.Contains(out, "403") {
		t.Errorf("metadata request answered %q, want 403", out)
	}
	// Allowed names, written in mixed case, go through and are logged so.
	if out := send("10.0.0.9:80", "GET /hi HTTP/1.1\r\nHost: Allowed.TEST\r\nConnection: close\r\n\r\n"); !strings.Contains(out, "hello Allowed.TEST /hi") {
		t.Errorf("mixed-case Host answered %q", out)
	}
	tp.setOrig("10.0.0.9:443")
	cfg := clientTLS(t)
	cfg.ServerName = "ALLOWED.test"
	tc, err := tls.Dial("tcp", tp.addr, cfg)
	if err != nil {
		t.Fatalf("TLS with a mixed-case SNI: %v", err)
	}
	tc.Close()

	for _, want := range []struct {
		what       string
		kind       Kind
		addr, host string
		port       uint16
		verdict    Verdict
		reason     string
	}{
		{"the refused SSH banner", KindTCP, "93.184.216.34", "", 2222, Deny, "timed out"},
		{"the silent client", KindTCP, "198.51.100.7", "", 5432, Deny, "no request"},
		{"the metadata request", KindHTTP, "169.254.169.254", "X.Example", 80, Deny, "not"},
		{"the mixed-case Host", KindHTTP, "10.0.0.9", "Allowed.TEST", 80, Allow, ""},
		{"the mixed-case SNI", KindTLS, "10.0.0.9", "ALLOWED.test", 443, Allow, ""},
	} {
		ev := tp.rec.waitFor(t, want.what, func(ev Event) bool { return ev.Addr == want.addr && ev.Port == want.port && ev.Kind == want.kind })
		if ev.Proto != "tcp" || ev.Host != want.host || ev.Verdict != want.verdict || !strings.Contains(ev.Reason, want.reason) {
			t.Errorf("%s: event %+v, want host %q, verdict %s, a reason saying %q", want.what, ev, want.host, want.verdict, want.reason)
		}
	}
}

// recordingMetrics counts denials by kind.
type recordingMetrics struct{ n map[string]int }

func (m *recordingMetrics) EgressDenied(kind string) { m.n[kind]++ }

// TestEventsLimitDenialsPerKind: refusals of one kind are kept up to the
// burst, then at the rate; the rest are counted into the dropped summary
// and every one into the metric; another kind has its own bucket, and
// allowed events are never limited.
func TestEventsLimitDenialsPerKind(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		met := &recordingMetrics{n: map[string]int{}}
		q := NewEvents(EventsConfig{DenyBurst: 20, DenyRate: 5}, EventsDeps{Sink: rec, Metrics: met})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- q.Run(ctx) }()
		flood := func(kind Kind, n int, v Verdict) {
			for i := range n {
				q.Emit(Event{Kind: kind, Addr: fmt.Sprintf("1.1.%d.%d", i/256, i%256), Verdict: v})
			}
			synctest.Wait()
		}
		flood(KindICMP, 500, Deny)  // 20 kept, 480 over the rate
		flood(KindUDP, 30, Deny)    // its own bucket: 20 kept, 10 over
		flood(KindTLS, 300, Allow)  // never limited
		time.Sleep(2 * time.Second) // 10 tokens for each kind
		synctest.Wait()
		summarized := func() (n int64) {
			for _, ev := range rec.all() {
				n += ev.Dropped
			}
			return n
		}
		if n := summarized(); n != 480+10 {
			t.Errorf("a second after the floods, the summaries count %d dropped, want %d", n, 480+10)
		}
		flood(KindICMP, 50, Deny) // 10 kept, 40 over
		cancel()
		<-done
		count := map[Kind]int{}
		for _, ev := range rec.all() {
			count[ev.Kind]++
		}
		dropped := summarized()
		if count[KindICMP] != 30 || count[KindUDP] != 20 || count[KindTLS] != 300 {
			t.Errorf("kept %v, want 30 icmp (burst 20, then 10 in 2 s), 20 udp and every one of 300 tls", count)
		}
		if dropped != 480+10+40 || q.Dropped() != dropped {
			t.Errorf("dropped summaries count %d (queue says %d), want %d", dropped, q.Dropped(), 480+10+40)
		}
		if met.n["icmp"] != 550 || met.n["udp"] != 30 || met.n["tls"] != 0 {
			t.Errorf("metric %v, want every denial counted (icmp 550, udp 30) and no allowed event", met.n)
		}
	})
}
