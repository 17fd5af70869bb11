package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// The host's bounds on refusals and drops of one kind (egress's
// DefaultDenyBurst and DefaultDenyRate).
const (
	denyBurst = 100
	denyRate  = 10
)

// dropWant is one event a guest's attempt must leave in its session's
// egress log.
type dropWant struct {
	what              string
	kind, proto, addr string
	host              string
	port              int
	reason            string // a part of it
}

func (w dropWant) matches(e apiv1.EgressEvent) bool {
	return e.Kind == w.kind && e.Proto == w.proto && e.Addr == w.addr && e.Host == w.host && e.Port == w.port &&
		e.Verdict == apiv1.EgressDeny && strings.Contains(e.Reason, w.reason)
}

// TestEgressDropsOnRecord (issue 25): from a QEMU guest, every way out
// the machine's network drops or refuses is in the session's egress log
// with its protocol, the address dialled and the port: ping, UDP to NTP
// and to 443 (QUIC), IPv6 to a documentation address (a neighbour
// solicitation for it when the guest asks its link, the TCP and UDP
// themselves when the guest has a neighbour entry for it), raw TCP to an
// unlisted port, and HTTP to the metadata address naming another host
// (both recorded, the name as sent). A burst of pings to 500 addresses
// makes a bounded number of events and counts the rest as dropped; 200
// echoes of one ping make one event. The CLI's --json carries the same.
func TestEgressDropsOnRecord(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	k := startEgressRig(t)
	id := k.session(t, []string{"allowed.test:" + k.port})
	for _, step := range []struct{ what, script string }{
		{"ping", "ping -c 3 -W 1 1.1.1.1"},
		{"NTP", "/tmp/netget udp 1.2.3.4:123"},
		{"QUIC", "/tmp/netget udp 1.2.3.4:443"},
		{"IPv6 on", "/tmp/netget v6 2001:db8::1 && ip -6 addr show dev eth0 | grep -q 2001:db8:1::2"},
		{"IPv6 without a neighbour", "/tmp/netget tcp [2001:db8::5]:443"},
		{"IPv6 TCP", "/tmp/netget tcp [2001:db8::1]:443"},
		{"IPv6 UDP", "/tmp/netget udp [2001:db8::1]:53"},
		{"raw TCP to an unlisted port", "/tmp/netget tcp 203.0.113.9:2222"},
		{"the metadata address, naming another host", `printf 'GET /latest/meta-data/ HTTP/1.1\r\nHost: X.Example\r\n\r\n' | nc -w 3 169.254.169.254 80`},
	} {
		out, code := k.run(t, id, step.script)
		if step.what == "IPv6 on" {
			if code != 0 {
				t.Fatalf("%s: exit %d, %q", step.what, code, out)
			}
			continue
		}
		if code == 0 && !strings.Contains(out, "403") {
			t.Errorf("%s got through: %q", step.what, out)
		}
	}
	wants := []dropWant{
		{"ping", "icmp", "icmp", "1.1.1.1", "", 0, "ICMP echo request"},
		{"NTP", "udp", "udp", "1.2.3.4", "", 123, "UDP to port 123"},
		{"QUIC", "udp", "udp", "1.2.3.4", "", 443, "UDP to port 443"},
		{"IPv6 without a neighbour", "icmp", "icmpv6", "2001:db8::5", "", 0, "neighbour solicitation for 2001:db8::5"},
		{"IPv6 TCP", "tcp", "tcp", "2001:db8::1", "", 443, "no IPv6"},
		{"IPv6 UDP", "udp", "udp", "2001:db8::1", "", 53, "no IPv6"},
		{"raw TCP to an unlisted port", "tcp", "tcp", "203.0.113.9", "", 2222, ""},
		{"the metadata address", "http", "tcp", "169.254.169.254", "X.Example", 80, "not"},
	}
	var log []apiv1.EgressEvent
	eventually(t, 30*time.Second, "every attempt in the egress log", func() (bool, string) {
		log = k.egress(t, id)
		return len(missing(log, wants)) == 0, "missing " + strings.Join(missing(log, wants), ", ") + "; have " + describeEgress(log)
	})
	t.Logf("the egress log: %s", describeEgress(log))
	for _, w := range wants {
		if n := count(log, w.matches); n != 1 {
			t.Errorf("%s: %d events, want one for its flow", w.what, n)
		}
	}
	k.pingBursts(t, id)

	// The CLI prints the same: --json carries protocol, address and port.
	var stdout, stderr syncBuffer
	if code := runCLI(context.Background(), k.url, k.token, &stdout, &stderr, "session", "egress", "--json", "--limit", "1000", id); code != 0 {
		t.Fatalf("session egress --json: exit %d: %s", code, stderr.String())
	}
	var cli []apiv1.EgressEvent
	for line := range strings.Lines(stdout.String()) {
		var e apiv1.EgressEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("session egress --json line %q: %v", line, err)
		}
		cli = append(cli, e)
	}
	if m := missing(cli, wants); len(m) != 0 {
		t.Errorf("session egress --json lacks %v", m)
	}
}

// pingBursts: one ping of 200 echoes is one flow, one event; echoes to
// 500 addresses at once make at most the burst of events, plus the rate
// while they last, and the rest is counted in dropped events.
func (k *egressRig) pingBursts(t *testing.T, id string) {
	t.Helper()
	before := k.egress(t, id)
	start := time.Now()
	if out, code := k.run(t, id, "ping -q -c 200 -i 0.01 -W 1 1.0.0.1; /tmp/netget pings 500 10.66"); code != 0 || !strings.Contains(out, "sent 500") {
		t.Fatalf("ping bursts: exit %d, %q", code, out)
	}
	took := time.Since(start)
	flood := func(e apiv1.EgressEvent) bool { return e.Kind == "icmp" && strings.HasPrefix(e.Addr, "10.66.") }
	var log []apiv1.EgressEvent
	eventually(t, 30*time.Second, "the bursts' events and dropped counts", func() (bool, string) {
		log = k.egress(t, id)
		n, dropped := count(log, flood), droppedSince(log, before)
		return n > 0 && int64(n)+dropped >= 500, fmt.Sprintf("%d flood events, %d dropped", n, dropped)
	})
	n, dropped := count(log, flood), droppedSince(log, before)
	bound := denyBurst + int(denyRate*(took.Seconds()+2))
	t.Logf("500 pings to distinct addresses: %d events, %d counted dropped (bound %d, the burst took %s)", n, dropped, bound, took.Round(time.Millisecond))
	if n > bound || n >= 500 {
		t.Errorf("500 pings made %d events, want at most %d (a burst of %d, then %d a second)", n, bound, denyBurst, denyRate)
	}
	if one := count(log, func(e apiv1.EgressEvent) bool { return e.Kind == "icmp" && e.Addr == "1.0.0.1" }); one != 1 {
		t.Errorf("a ping of 200 echoes made %d events, want 1", one)
	}
}

// egress reads session id's whole log (newest first).
func (k *egressRig) egress(t *testing.T, id string) []apiv1.EgressEvent {
	t.Helper()
	l, err := k.c.Sessions().Egress(context.Background(), id, client.EgressQuery{Limit: apiv1.MaxEgressPage})
	if err != nil {
		t.Fatalf("read the egress log: %v", err)
	}
	return l.Events
}

func missing(log []apiv1.EgressEvent, wants []dropWant) []string {
	var out []string
	for _, w := range wants {
		if count(log, w.matches) == 0 {
			out = append(out, w.what)
		}
	}
	return out
}

func count(log []apiv1.EgressEvent, match func(apiv1.EgressEvent) bool) int {
	n := 0
	for _, e := range log {
		if match(e) {
			n++
		}
	}
	return n
}

// droppedSince sums the dropped events of log that before does not hold.
func droppedSince(log, before []apiv1.EgressEvent) int64 {
	var newest int64
	if len(before) > 0 {
		newest = before[0].Seq
	}
	var n int64
	for _, e := range log {
		if e.Seq > newest && e.Kind == apiv1.EgressDropped {
			n += e.Dropped
		}
	}
	return n
}

func describeEgress(log []apiv1.EgressEvent) string {
	var b strings.Builder
	for _, e := range log {
		fmt.Fprintf(&b, "\n  %s %s %s %q %d %s %s", e.Kind, e.Proto, e.Addr, e.Host, e.Port, e.Verdict, e.Reason)
	}
	return b.String()
}
