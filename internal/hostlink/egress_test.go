package hostlink_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/hostlink"
)

func TestEgressPath(t *testing.T) {
	t.Parallel()
	if got, want := hostlink.EgressPath("s1"), "/v1/sessions/s1/egress"; got != want {
		t.Errorf("EgressPath = %q, want %q", got, want)
	}
}

func report(t *testing.T, rep any) []byte {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func events(n int, ev hostlink.EgressEvent) []hostlink.EgressEvent {
	out := make([]hostlink.EgressEvent, n)
	for i := range out {
		out[i] = ev
	}
	return out
}

// TestDecodeEgressReport: a report within the bounds comes back with its
// events clipped; one over a bound, or with a kind or verdict no host
// sends, is refused with ErrBadEgressReport and says why.
func TestDecodeEgressReport(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ok := hostlink.EgressEvent{At: at, Kind: hostlink.EgressTLS, Host: "pypi.org", Port: 443, Verdict: hostlink.EgressAllow, BytesUp: 10, BytesDown: 20, Reason: "allowed by pypi.org"}
	long := strings.Repeat("a", 300)
	tests := []struct {
		name    string
		body    []byte
		want    hostlink.EgressReport
		wantErr string
	}{
		{name: "one event", body: report(t, hostlink.EgressReport{Epoch: 3, Events: []hostlink.EgressEvent{ok}, Dropped: 2}),
			want: hostlink.EgressReport{Epoch: 3, Events: []hostlink.EgressEvent{ok}, Dropped: 2}},
		{name: "no events, only drops", body: []byte(`{"epoch":1,"dropped":7}`), want: hostlink.EgressReport{Epoch: 1, Dropped: 7}},
		{name: "every kind", body: report(t, hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{
			{Kind: "dns", Verdict: "deny"}, {Kind: "tcp", Verdict: "deny"}, {Kind: "http", Verdict: "allow"}, {Kind: "connect", Verdict: "allow"}}}),
			want: hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{
				{Kind: "dns", Verdict: "deny"}, {Kind: "tcp", Verdict: "deny"}, {Kind: "http", Verdict: "allow"}, {Kind: "connect", Verdict: "allow"}}}},
		{name: "clipped", body: report(t, hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{
			{Kind: "dns", Verdict: "deny", Host: long, Reason: long + long, BytesUp: -5, BytesDown: -1}}}),
			want: hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{
				{Kind: "dns", Verdict: "deny", Host: long[:hostlink.MaxEgressHost], Reason: (long + long)[:hostlink.MaxEgressReason]}}}},
		{name: "NUL and bad UTF-8 replaced", body: []byte(`{"epoch":1,"events":[{"kind":"dns","verdict":"deny","host":"a\u0000b","reason":"x\u001b[2Jy"}]}`),
			want: hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{{Kind: "dns", Verdict: "deny", Host: "a\uFFFDb", Reason: "x\x1b[2Jy"}}}},
		{name: "full batch", body: report(t, hostlink.EgressReport{Epoch: 1, Events: events(hostlink.MaxEgressEvents, ok)}),
			want: hostlink.EgressReport{Epoch: 1, Events: events(hostlink.MaxEgressEvents, ok)}},
		{name: "too many events", body: report(t, hostlink.EgressReport{Epoch: 1, Events: events(hostlink.MaxEgressEvents+1, ok)}),
			wantErr: "257 events, at most 256"},
		{name: "dropped flows", body: []byte(`{"epoch":1,"events":[{"kind":"udp","proto":"udp","addr":"1.2.3.4","port":123,"verdict":"deny"},` +
			`{"kind":"icmp","proto":"icmpv6","addr":"2001:DB8::1","verdict":"deny"},{"kind":"ip","proto":"47","addr":"::ffff:10.0.0.1","verdict":"deny"},` +
			`{"kind":"tcp","proto":"tcp","addr":"169.254.169.254","host":"X.Example","port":80,"verdict":"deny"}]}`),
			want: hostlink.EgressReport{Epoch: 1, Events: []hostlink.EgressEvent{
				{Kind: "udp", Proto: "udp", Addr: "1.2.3.4", Port: 123, Verdict: "deny"},
				{Kind: "icmp", Proto: "icmpv6", Addr: "2001:db8::1", Verdict: "deny"},
				{Kind: "ip", Proto: "47", Addr: "::ffff:10.0.0.1", Verdict: "deny"},
				{Kind: "tcp", Proto: "tcp", Addr: "169.254.169.254", Host: "X.Example", Port: 80, Verdict: "deny"}}}},
		{name: "unknown kind", body: []byte(`{"epoch":1,"events":[{"kind":"smtp","verdict":"allow"}]}`), wantErr: `events[0]: kind "smtp"`},
		{name: "address that is none", body: []byte(`{"epoch":1,"events":[{"kind":"udp","verdict":"deny","addr":"evil.test"}]}`), wantErr: `addr "evil.test"`},
		{name: "zoned address", body: []byte(`{"epoch":1,"events":[{"kind":"udp","verdict":"deny","addr":"fe80::1%eth0"}]}`), wantErr: `addr "fe80::1%eth0"`},
		{name: "protocol that is no name", body: []byte(`{"epoch":1,"events":[{"kind":"udp","verdict":"deny","proto":"UDP\u001b"}]}`), wantErr: `proto "UDP\x1b"`},
		{name: "protocol too long", body: []byte(`{"epoch":1,"events":[{"kind":"udp","verdict":"deny","proto":"` + strings.Repeat("u", 17) + `"}]}`), wantErr: "proto"},
		{name: "dropped kind is the coordinator's", body: []byte(`{"epoch":1,"events":[{"kind":"dropped","verdict":"allow"}]}`), wantErr: `kind "dropped"`},
		{name: "unknown verdict", body: []byte(`{"epoch":1,"events":[{"kind":"dns","verdict":"maybe"}]}`), wantErr: `verdict "maybe"`},
		{name: "no verdict", body: []byte(`{"epoch":1,"events":[{"kind":"dns"}]}`), wantErr: `verdict ""`},
		{name: "negative dropped", body: []byte(`{"epoch":1,"dropped":-1}`), wantErr: "dropped -1"},
		{name: "port out of range", body: []byte(`{"epoch":1,"events":[{"kind":"tcp","verdict":"deny","port":70000}]}`), wantErr: "decode"},
		{name: "not JSON", body: []byte(`{"epoch":`), wantErr: "decode"},
		{name: "over the byte bound", body: append([]byte(`{"epoch":1,"events":[],"pad":"`), append(bytes.Repeat([]byte("x"), hostlink.MaxEgressReportBytes), '"', '}')...),
			wantErr: "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := hostlink.DecodeEgressReport(bytes.NewReader(tt.body))
			if tt.wantErr != "" {
				if !errors.Is(err, hostlink.ErrBadEgressReport) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeEgressReport = %v, want ErrBadEgressReport saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeEgressReport: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("DecodeEgressReport =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestClipKeepsRunes: a cut never splits a character.
func TestClipKeepsRunes(t *testing.T) {
	t.Parallel()
	host := strings.Repeat("é", 200) // 400 bytes
	got := hostlink.EgressEvent{Host: host}.Clipped().Host
	if len(got) != 252 || !utf8.ValidString(got) {
		t.Errorf("clipped host is %d bytes (valid %v), want 252 of whole runes", len(got), utf8.ValidString(got))
	}
}

// FuzzDecodeEgressReport feeds DecodeEgressReport anything a host (maybe
// compromised) can post: what it accepts is within every bound, of known
// kinds and verdicts, with text a database stores.
func FuzzDecodeEgressReport(f *testing.F) {
	f.Add([]byte(`{"epoch":1,"events":[{"at":"2026-12-03T10:00:00Z","kind":"tls","host":"pypi.org","port":443,"verdict":"allow","bytes_up":1,"bytes_down":2,"reason":"ok"}],"dropped":3}`))
	f.Add([]byte(`{"epoch":1,"events":[{"kind":"dns","verdict":"deny","host":"\u0000\udc00\u00e9","reason":"\u001b]52;c;x\u0007"}]}`))
	f.Add([]byte(`{"epoch":-1,"events":null,"dropped":0}`))
	f.Add([]byte(`{"epoch":1,"events":[{"kind":"icmp","proto":"icmpv6","addr":"::FFFF:1.2.3.4","verdict":"deny"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := hostlink.DecodeEgressReport(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, hostlink.ErrBadEgressReport) {
				t.Fatalf("refusal %v is not ErrBadEgressReport", err)
			}
			return
		}
		if len(rep.Events) > hostlink.MaxEgressEvents || rep.Dropped < 0 || rep.Dropped > hostlink.MaxEgressDropped {
			t.Fatalf("accepted %d events, %d dropped", len(rep.Events), rep.Dropped)
		}
		for _, e := range rep.Events {
			if e.Check() != nil || e.BytesUp < 0 || e.BytesDown < 0 {
				t.Fatalf("accepted %+v", e)
			}
			if a, err := netip.ParseAddr(e.Addr); e.Addr != "" && (err != nil || a.String() != e.Addr) {
				t.Fatalf("accepted address %q", e.Addr)
			}
			for _, s := range []struct {
				v string
				n int
			}{{e.Host, hostlink.MaxEgressHost}, {e.Reason, hostlink.MaxEgressReason}, {e.Proto, hostlink.MaxEgressProto}} {
				if len(s.v) > s.n || !utf8.ValidString(s.v) || strings.ContainsRune(s.v, 0) {
					t.Fatalf("accepted text %q (bound %d)", s.v, s.n)
				}
			}
		}
	})
}
