package egress

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

type testDNS struct {
	d        *DNS
	udp, tcp string
	upstream *fakeUpstream
	names    *fakeNames
	rec      *recorder
}

// newTestDNS runs a resolver on 127.0.0.1 that allows allowed.test (its
// upstream answers a public, a loopback and a private address) and
// private.test (only blocked addresses).
func newTestDNS(t *testing.T, cfg DNSConfig) *testDNS {
	t.Helper()
	return newTestDNSWith(t, cfg, nil)
}

// newTestDNSWith is newTestDNS with answers presented through present.
func newTestDNSWith(t *testing.T, cfg DNSConfig, present func(netip.Addr) netip.Addr) *testDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	events, rec := runEvents(t)
	td := &testDNS{udp: pc.LocalAddr().String(), tcp: ln.Addr().String(), rec: rec,
		names: &fakeNames{allowed: map[string][]uint16{"allowed.test": {443}, "private.test": nil}},
		upstream: &fakeUpstream{addrs: map[string][]netip.Addr{
			"allowed.test.": {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1"),
				netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("2606:2800:220:1::1"), netip.MustParseAddr("::1")},
			"private.test.":  {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")},
			"attacker.test.": {netip.MustParseAddr("93.184.216.99")},
		}}}
	td.d, err = NewDNS(cfg, DNSDeps{UDP: pc, TCP: ln, Names: td.names, Upstream: td.upstream, Addrs: fakeAddrs{}, Events: events, Present: present})
	if err != nil {
		t.Fatal(err)
	}
	runBackground(t, td.d.Run)
	return td
}

func (td *testDNS) exchange(t *testing.T, network string, name string, qtype uint16, class uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.Question[0].Qclass = class
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	addr := td.udp
	if network == "tcp" {
		addr = td.tcp
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, name, err)
	}
	return r
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}

func TestDNSAnswersOnlyAllowedNamesWithUnblockedAddresses(t *testing.T) {
	t.Parallel()
	exfil := strings.Repeat("6b6579", 9) + ".c2VjcmV0.attacker.test."
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			t.Parallel()
			td := newTestDNS(t, DNSConfig{})
			for _, tc := range []struct {
				name   string
				qname  string
				qtype  uint16
				class  uint16
				rcode  int
				answer []string
			}{
				{"allowed A drops loopback and private", "allowed.test.", dns.TypeA, dns.ClassINET, dns.RcodeSuccess, []string{"93.184.216.34"}},
				{"allowed AAAA drops ::1", "Allowed.Test.", dns.TypeAAAA, dns.ClassINET, dns.RcodeSuccess, []string{"2606:2800:220:1::1"}},
				{"only blocked addresses: no data", "private.test.", dns.TypeA, dns.ClassINET, dns.RcodeSuccess, nil},
				{"exfiltration", exfil, dns.TypeA, dns.ClassINET, dns.RcodeNameError, nil},
				{"exfiltration by TXT", exfil, dns.TypeTXT, dns.ClassINET, dns.RcodeNameError, nil},
				{"the attacker's own name", "attacker.test.", dns.TypeAAAA, dns.ClassINET, dns.RcodeNameError, nil},
				{"a subdomain of an allowed name", "x.allowed.test.", dns.TypeA, dns.ClassINET, dns.RcodeNameError, nil},
				{"allowed name, other type: no data", "allowed.test.", dns.TypeTXT, dns.ClassINET, dns.RcodeSuccess, nil},
				{"HTTPS record (ECH keys): no data", "allowed.test.", dns.TypeHTTPS, dns.ClassINET, dns.RcodeSuccess, nil},
				{"escaped dot in a label", `allowed\.test.`, dns.TypeA, dns.ClassINET, dns.RcodeNameError, nil},
				{"ANY", "allowed.test.", dns.TypeANY, dns.ClassINET, dns.RcodeRefused, nil},
				{"CHAOS class", "version.bind.", dns.TypeTXT, dns.ClassCHAOS, dns.RcodeRefused, nil},
			} {
				r := td.exchange(t, network, tc.qname, tc.qtype, tc.class)
				if r.Rcode != tc.rcode || !slices.Equal(answers(r), tc.answer) {
					t.Errorf("%s: rcode %s, answers %v; want %s, %v", tc.name, dns.RcodeToString[r.Rcode], answers(r),
						dns.RcodeToString[tc.rcode], tc.answer)
				}
				for _, rr := range r.Answer {
					if rr.Header().Ttl != 30 {
						t.Errorf("%s: TTL %d, want 30", tc.name, rr.Header().Ttl)
					}
				}
			}
			want := []string{"allowed.test.", "allowed.test.", "private.test."}
			if got := td.upstream.names(); !slices.Equal(got, want) {
				t.Errorf("upstream was asked %q, want only %q", got, want)
			}
			ev := td.rec.waitFor(t, "for the exfiltration", func(ev Event) bool { return strings.HasSuffix(ev.Host, "attacker.test") })
			if ev.Kind != KindDNS || ev.Verdict != Deny || !strings.Contains(ev.Reason, "not in the allowlist") {
				t.Errorf("exfiltration event %+v", ev)
			}
			ev = td.rec.waitFor(t, "for private.test", func(ev Event) bool { return ev.Host == "private.test" })
			if ev.Verdict != Deny || !strings.Contains(ev.Reason, "2 blocked") || ev.Proto != network {
				t.Errorf("private.test event %+v, want a denial over %s naming 2 blocked addresses", ev, network)
			}
			// The log has the name as the guest asked it, case kept.
			ev = td.rec.waitFor(t, "for Allowed.Test", func(ev Event) bool { return ev.Host == "Allowed.Test" })
			if ev.Verdict != Allow {
				t.Errorf("Allowed.Test event %+v, want allowed", ev)
			}
		})
	}
}

// TestDNSIPv4OnlyAndPresent: with IPv4Only, AAAA of an allowed name gets
// no address and no upstream lookup; Present maps each kept address.
func TestDNSIPv4OnlyAndPresent(t *testing.T) {
	t.Parallel()
	standIn := netip.MustParseAddr("198.51.100.1")
	td := newTestDNSWith(t, DNSConfig{IPv4Only: true}, func(netip.Addr) netip.Addr { return standIn })
	if r := td.exchange(t, "udp", "allowed.test.", dns.TypeAAAA, dns.ClassINET); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("AAAA: rcode %s, answers %v; want no data", dns.RcodeToString[r.Rcode], answers(r))
	}
	if r := td.exchange(t, "udp", "allowed.test.", dns.TypeA, dns.ClassINET); !slices.Equal(answers(r), []string{standIn.String()}) {
		t.Errorf("A: answers %v, want the presented %s", answers(r), standIn)
	}
	if got := td.upstream.names(); !slices.Equal(got, []string{"allowed.test."}) {
		t.Errorf("upstream was asked %q, want only the A lookup", got)
	}
}

func TestDNSRefusesOddMessages(t *testing.T) {
	t.Parallel()
	td := newTestDNS(t, DNSConfig{})
	c, err := net.Dial("udp", td.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	two := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	twoRaw, _ := two.Pack()
	notify := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA)
	notify.Opcode = dns.OpcodeNotify
	notifyRaw, _ := notify.Pack()
	for _, tc := range []struct {
		name  string
		raw   []byte
		rcode int
	}{
		{"garbage after a header", []byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xff}, dns.RcodeFormatError},
		{"two questions", twoRaw, dns.RcodeFormatError},
		{"NOTIFY", notifyRaw, dns.RcodeNotImplemented},
	} {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(tc.raw); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var r dns.Msg
		if err := r.Unpack(buf[:n]); err != nil || r.Rcode != tc.rcode || r.Id != binary.BigEndian.Uint16(tc.raw) {
			t.Errorf("%s: answer %v (%v), want rcode %s with the query's id", tc.name, r.MsgHdr, err, dns.RcodeToString[tc.rcode])
		}
	}
	if got := td.upstream.names(); len(got) != 0 {
		t.Errorf("upstream asked %q", got)
	}
}

func TestDNSRateLimitDropsQueries(t *testing.T) {
	t.Parallel()
	td := newTestDNS(t, DNSConfig{QPS: 0.001, Burst: 2})
	c := &dns.Client{Net: "udp", Timeout: 300 * time.Millisecond}
	answered := 0
	for range 5 {
		if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("attacker.test.", dns.TypeA), td.udp); err == nil {
			answered++
		}
	}
	if answered != 2 {
		t.Errorf("%d of 5 queries answered, want the burst of 2", answered)
	}
	ev := td.rec.waitFor(t, "summarizing the rate limit", func(ev Event) bool { return strings.Contains(ev.Reason, "rate limit") })
	if ev.Verdict != Deny || ev.Kind != KindDNS {
		t.Errorf("rate event %+v", ev)
	}
}

func TestDNSTCPBounds(t *testing.T) {
	t.Parallel()
	td := newTestDNS(t, DNSConfig{MaxTCPConns: 1})
	held, err := net.Dial("tcp", td.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// One query answered proves held is being served before the next dial.
	m, _ := new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA).Pack()
	held.SetDeadline(time.Now().Add(5 * time.Second))
	held.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...))
	var hdr [2]byte
	if _, err := io.ReadFull(held, hdr[:]); err != nil {
		t.Fatalf("first connection's answer: %v", err)
	}
	io.CopyN(io.Discard, held, int64(binary.BigEndian.Uint16(hdr[:])))

	second, err := net.Dial("tcp", td.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(hdr[:]); err != io.EOF {
		t.Errorf("a second connection past the bound of 1 read %d, %v; want it closed at once", n, err)
	}
	// A length prefix over the bound closes the connection.
	held.Write([]byte{0xff, 0xff})
	if n, err := held.Read(hdr[:]); err != io.EOF {
		t.Errorf("after a 65535-byte prefix read %d, %v; want the connection closed", n, err)
	}
}

func TestDNSIdleTCPConnectionIsClosed(t *testing.T) {
	t.Parallel()
	td := newTestDNS(t, DNSConfig{IdleTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", td.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection read %v, want EOF", err)
	}
}

// FuzzDNSAnswer feeds arbitrary messages to the query handler: it never
// panics, answers only with messages that parse, and asks the upstream
// only for allowed names.
func FuzzDNSAnswer(f *testing.F) {
	for _, q := range []*dns.Msg{
		new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA),
		new(dns.Msg).SetQuestion("allowed.test.", dns.TypeAAAA),
		new(dns.Msg).SetQuestion("x.attacker.test.", dns.TypeTXT),
		new(dns.Msg).SetQuestion("allowed.test.", dns.TypeAXFR),
		new(dns.Msg).SetQuestion("allowed.test.", dns.TypeA).SetEdns0(4096, true),
	} {
		raw, _ := q.Pack()
		f.Add(raw, true)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 1}, false)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer pc.Close()
	up := &fakeUpstream{addrs: map[string][]netip.Addr{"allowed.test.": {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.5")}}}
	d, err := NewDNS(DNSConfig{}, DNSDeps{UDP: pc, Names: &fakeNames{allowed: map[string][]uint16{"allowed.test": nil}},
		Upstream: up, Addrs: fakeAddrs{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte, udp bool) {
		out := d.answer(context.Background(), raw, udp)
		if out != nil {
			var m dns.Msg
			if err := m.Unpack(out); err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
			if udp && len(out) > maxUDPAnswer {
				t.Fatalf("UDP answer of %d bytes", len(out))
			}
			for _, a := range answers(&m) {
				if a == "10.0.0.5" {
					t.Fatalf("answered a blocked address")
				}
			}
		}
		for _, n := range up.names() {
			if n != "allowed.test." {
				t.Fatalf("upstream asked %q", n)
			}
		}
	})
}
