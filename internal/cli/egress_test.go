package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/clienttest"
)

// newEgressServer returns a fake whose session s1 has these egress events,
// oldest first: an allowed TLS connection from a host that did not say its
// protocol and address, a denied DNS query, a dropped count, an HTTP
// request to the metadata address naming another host, a dropped ping and
// a dropped UDP flow over IPv6.
func newEgressServer(t *testing.T) *clienttest.Server {
	t.Helper()
	srv := newServer(t)
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "tls", Host: "pypi.org", Port: 443, Verdict: "allow", BytesUp: 812, BytesDown: 3 << 20, Reason: "allowed by pypi.org"})
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "dns", Proto: "udp", Host: "x\tevil.test", Port: 53, Verdict: "deny", Reason: "not on the\nallowlist"})
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "dropped", Dropped: 40, Reason: "40 egress events not kept"})
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "http", Proto: "tcp", Addr: "169.254.169.254", Host: "X.Example", Port: 80, Verdict: "deny", Reason: "not on the allowlist"})
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "icmp", Proto: "icmp", Addr: "1.1.1.1", Verdict: "deny", Reason: "ICMP echo request: dropped"})
	srv.AddEgress("s1", apiv1.EgressEvent{Kind: "udp", Proto: "udp", Addr: "2001:db8::1", Port: 443, Verdict: "deny", Reason: "IPv6: dropped"})
	return srv
}

func TestSessionEgress(t *testing.T) {
	t.Parallel()
	header := "TIME                 KIND     PROTO   ADDR             HOST                               PORT  VERDICT         UP       DOWN  REASON\n"
	lines := []string{
		"2026-11-30 06:00:05  udp      udp     2001:db8::1      -                                   443  deny           0 B        0 B  IPv6: dropped\n",
		"2026-11-30 06:00:04  icmp     icmp    1.1.1.1          -                                     -  deny           0 B        0 B  ICMP echo request: dropped\n",
		"2026-11-30 06:00:03  http     tcp     169.254.169.254  X.Example                            80  deny           0 B        0 B  not on the allowlist\n",
		"2026-11-30 06:00:02  dropped  -       -                -                                     -  -                -          -  40 egress events not kept\n",
		"2026-11-30 06:00:01  dns      udp     -                x evil.test                          53  deny           0 B        0 B  not on the allowlist\n",
		"2026-11-30 06:00:00  tls      -       -                pypi.org                            443  allow        812 B    3.0 MiB  allowed by pypi.org\n",
	}
	runTable(t, newEgressServer, []cmdTest{
		{name: "newest first", args: []string{"session", "egress", "s1"}, stdout: header + strings.Join(lines, "")},
		{name: "limit", args: []string{"session", "egress", "-n", "2", "s1"}, stdout: header + lines[0] + lines[1]},
		{name: "json", args: []string{"session", "egress", "--json", "--limit", "4", "s1"},
			stdout: `{"seq":6,"time":"2026-11-30T06:00:05Z","kind":"udp","proto":"udp","addr":"2001:db8::1","port":443,"verdict":"deny","bytes_up":0,"bytes_down":0,"reason":"IPv6: dropped"}` + "\n" +
				`{"seq":5,"time":"2026-11-30T06:00:04Z","kind":"icmp","proto":"icmp","addr":"1.1.1.1","verdict":"deny","bytes_up":0,"bytes_down":0,"reason":"ICMP echo request: dropped"}` + "\n" +
				`{"seq":4,"time":"2026-11-30T06:00:03Z","kind":"http","proto":"tcp","addr":"169.254.169.254","host":"X.Example","port":80,"verdict":"deny","bytes_up":0,"bytes_down":0,"reason":"not on the allowlist"}` + "\n" +
				`{"seq":3,"time":"2026-11-30T06:00:02Z","kind":"dropped","bytes_up":0,"bytes_down":0,"reason":"40 egress events not kept","dropped":40}` + "\n"},
		{name: "limit out of range", args: []string{"session", "egress", "--limit", "0", "s1"}, code: 2, errContain: []string{"--limit 0: want 1 to 1000"}},
		{name: "limit too large", args: []string{"session", "egress", "--limit", "1001", "s1"}, code: 2, errContain: []string{"want 1 to 1000"}},
		{name: "unknown session", args: []string{"session", "egress", "zz"}, code: 1,
			errContain: []string{"error: egress of session zz:", "hint: list sessions with `engrams session list`"}},
		{name: "no id", args: []string{"session", "egress"}, code: 2, errContain: []string{"hint: see `engrams session egress --help`"}},
	})
}

// TestSessionEgressFollow: after the newest page, new events are printed
// as they arrive, each once, until the session ends.
func TestSessionEgressFollow(t *testing.T) {
	t.Parallel()
	srv := newEgressServer(t)
	done := make(chan result, 1)
	go func() { done <- run(t, srv, nil, "", "session", "egress", "-f", "--json", "-n", "2", "s1") }()
	waitRequest(t, srv, "limit=2") // the newest page was read
	for i := range 3 {
		srv.AddEgress("s1", apiv1.EgressEvent{Kind: "http", Host: fmt.Sprintf("live%d.test", i), Port: 80, Verdict: "allow"})
		time.Sleep(5 * time.Millisecond)
	}
	waitRequest(t, srv, "after=9") // the follower asked past the last event
	srv.SetSessionState("s1", "completed")
	got := <-done
	if got.code != 0 {
		t.Fatalf("code %d: %s", got.code, got.stderr)
	}
	var seqs []int64
	for line := range strings.Lines(got.stdout) {
		var ev apiv1.EgressEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	if fmt.Sprint(seqs) != "[6 5 7 8 9]" {
		t.Errorf("seqs = %v, want the newest two, then 7 8 9 as they came", seqs)
	}
}

// waitRequest waits until the fake saw a request holding s.
func waitRequest(t *testing.T, srv *clienttest.Server, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(strings.Join(srv.Requests(), "\n"), s) {
		select {
		case <-deadline:
			t.Fatalf("no request with %q; so far: %q", s, srv.Requests())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
