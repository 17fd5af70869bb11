package qemu

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/testutil"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmnet"
)

// guestNet is a machine network with test listeners in its namespace:
// the proxy answers each connection with "<tag> <original destination>",
// the resolver answers DNS with NXDOMAIN and anything else over UDP with
// "<tag> dns-udp", and a UDP socket on the gateway's port 443 counts what
// the rules let through to it (nothing, they must not).
type guestNet struct {
	*vmnet.Net
	tag string

	mu      sync.Mutex
	seen    []string // what each listener got, in order
	udp443  int
	queries []string
}

func newGuestNet(t *testing.T, tag string) *guestNet {
	t.Helper()
	if err := vmnet.Available(); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	n, err := vmnet.New(context.Background(), vmnet.Config{})
	if err != nil {
		t.Fatalf("new machine network: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	g := &guestNet{Net: n, tag: tag}
	proxy, err := n.Listen("tcp", n.ProxyAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	resolverTCP, err := n.Listen("tcp", n.ResolverAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := n.ListenPacket("udp", n.ResolverAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	quic, err := n.ListenPacket("udp", vmnet.HostAddr.String()+":443")
	if err != nil {
		t.Fatal(err)
	}
	go g.serveTCP(proxy, "")
	go g.serveTCP(resolverTCP, "dns-tcp ")
	go g.serveUDP(resolver)
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := quic.ReadFrom(buf); err != nil {
				return
			}
			g.mu.Lock()
			g.udp443++
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *guestNet) record(s string) {
	g.mu.Lock()
	g.seen = append(g.seen, s)
	g.mu.Unlock()
}

func (g *guestNet) serveTCP(ln net.Listener, kind string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		dst, err := vmnet.OriginalDst(c)
		line := fmt.Sprintf("%s %s%v", g.tag, kind, dst)
		if err != nil {
			line = fmt.Sprintf("%s %serror %v", g.tag, kind, err)
		}
		g.record(line)
		fmt.Fprintln(c, line)
		c.Close()
	}
}

func (g *guestNet) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := buf[:n]
		if bytes.HasPrefix(q, []byte("probe")) || n < 12 {
			g.record(g.tag + " dns-udp")
			pc.WriteTo([]byte(g.tag+" dns-udp"), from)
			continue
		}
		g.mu.Lock()
		g.queries = append(g.queries, dnsName(q[12:]))
		g.mu.Unlock()
		ans := append([]byte{}, q...)
		ans[2], ans[3] = 0x81, 0x83 // a response, recursion available, NXDOMAIN
		pc.WriteTo(ans, from)
	}
}

// dnsName reads the question's name (test answers only, bounded by the
// datagram).
func dnsName(b []byte) string {
	var labels []string
	for len(b) > 0 && b[0] != 0 && int(b[0]) < len(b) {
		labels = append(labels, string(b[1:1+b[0]]))
		b = b[1+b[0]:]
	}
	return strings.Join(labels, ".")
}

func (g *guestNet) counts() (seen []string, udp443 int, queries []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.seen...), g.udp443, append([]string{}, g.queries...)
}

// buildNetprobe builds testdata/netprobe, static, for the guest.
func buildNetprobe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "netprobe")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./testdata/netprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build netprobe: %v\n%s", err, b)
	}
	return out
}

func uploadNetprobe(t *testing.T, m vmm.Machine, probe string) {
	t.Helper()
	f, err := os.Open(probe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.Upload(ctx, "/tmp/netprobe", 0o755, f); err != nil {
		t.Fatalf("upload netprobe: %v", err)
	}
}

// execRun runs argv in the guest and returns its stdout and exit code.
func execRun(t *testing.T, m vmm.Machine, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	var out, errb bytes.Buffer
	res, err := cl.Exec(ctx, guestapi.ExecStart{Argv: argv}, nil, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return strings.TrimSpace(out.String() + errb.String()), res.ExitCode
}

// reaches checks the guest's connection to addr lands on g's listeners
// with the answer want.
func reaches(t *testing.T, m vmm.Machine, want string, argv ...string) {
	t.Helper()
	out, code := execRun(t, m, append([]string{"/tmp/netprobe"}, argv...)...)
	if code != 0 || out != want {
		t.Errorf("netprobe %q: exit %d, %q; want %q", argv, code, out, want)
	}
}

// fails checks the guest's probe gets nothing back.
func fails(t *testing.T, m vmm.Machine, argv ...string) {
	t.Helper()
	if out, code := execRun(t, m, argv...); code == 0 {
		t.Errorf("%q from the guest succeeded: %q", argv, out)
	}
}

// allFail runs each probe (a shell command line) in the guest at once and
// checks every one gets nothing back.
func allFail(t *testing.T, m vmm.Machine, probes ...string) {
	t.Helper()
	var script strings.Builder
	for i, p := range probes {
		fmt.Fprintf(&script, "(%s >/dev/null 2>&1; echo \"%d $?\") &\n", p, i)
	}
	script.WriteString("wait\n")
	out, code := execRun(t, m, "sh", "-c", script.String())
	if code != 0 {
		t.Fatalf("probes: exit %d: %s", code, out)
	}
	got := 0
	for _, line := range strings.Split(out, "\n") {
		var i, exit int
		if _, err := fmt.Sscanf(line, "%d %d", &i, &exit); err != nil || i < 0 || i >= len(probes) {
			t.Fatalf("probe output %q", out)
		}
		got++
		if exit == 0 {
			t.Errorf("%q from the guest succeeded", probes[i])
		}
	}
	if got != len(probes) {
		t.Errorf("%d of %d probes answered: %q", got, len(probes), out)
	}
}

// TestNetworkPath boots a guest on a machine network, shows what its
// traffic reaches, then snapshots it and restores it behind a new
// namespace, where the network works again.
func TestNetworkPath(t *testing.T) {
	netA := newGuestNet(t, "A")
	b := newTestBackend(t)
	probe := buildNetprobe(t)
	acquireGuest(t)
	ctx := context.Background()
	t0 := time.Now()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: "net", Dir: t.TempDir(), MemoryMiB: 256, VCPUs: 1,
		Network: &vmm.Network{Tap: netA.TapFile()}})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	defer m.Destroy(ctx)
	t.Logf("boot with a network → ready %.2fs", time.Since(t0).Seconds())
	uploadNetprobe(t, m, probe)

	if out, _ := execRun(t, m, "cat", "/etc/resolv.conf"); !strings.Contains(out, "\nnameserver 10.0.2.2") || strings.Count(out, "nameserver") != 1 {
		t.Errorf("resolv.conf = %q, want only nameserver 10.0.2.2", out)
	}
	reaches(t, m, "A 1.2.3.4:443", "tcp", "1.2.3.4:443")
	reaches(t, m, "A 169.254.169.254:80", "tcp", "169.254.169.254:80")
	reaches(t, m, "A 10.0.2.2:22", "tcp", "10.0.2.2:22")
	reaches(t, m, "A dns-tcp 8.8.8.8:53", "tcp", "8.8.8.8:53")
	reaches(t, m, "A dns-udp", "udp", "8.8.8.8:53", "probe")
	if out, _ := execRun(t, m, "nslookup", "exfil.attacker.test"); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("nslookup through resolv.conf: %q, want NXDOMAIN from the test resolver", out)
	}
	before, _, _ := netA.counts()
	if out, code := execRun(t, m, "ip", "-6", "addr", "add", "2001:db8::2/64", "dev", "eth0"); code != 0 {
		t.Fatalf("give the guest an IPv6 address: %q", out)
	}
	allFail(t, m,
		"ping -c 1 -W 2 10.0.2.2",
		"ping -c 1 -W 2 1.2.3.4",
		"/tmp/netprobe udp 10.0.2.2:443 quic",
		"/tmp/netprobe udp 1.2.3.4:443 quic",
		"/tmp/netprobe udp 1.2.3.4:123 ntp",
		"/tmp/netprobe tcp [2001:db8::1]:443",
		"/tmp/netprobe tcp [fe80::1%eth0]:443",
	)
	after, udp443, queries := netA.counts()
	if len(after) != len(before) || udp443 != 0 {
		t.Errorf("dropped traffic reached the listeners: %q, %d datagrams on udp :443", after[len(before):], udp443)
	}
	if len(queries) == 0 || queries[0] != "exfil.attacker.test" {
		t.Errorf("resolver queries %q, want exfil.attacker.test", queries)
	}

	snap, err := m.Snapshot(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := m.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	netA.Close()
	netB := newGuestNet(t, "B")
	t0 = time.Now()
	r, err := b.Restore(ctx, vmm.Spec{SessionID: "net-r", Dir: t.TempDir(), Network: &vmm.Network{Tap: netB.TapFile()}}, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer r.Destroy(ctx)
	reaches(t, r, "B 1.2.3.4:443", "tcp", "1.2.3.4:443")
	t.Logf("restore behind a new namespace → first proxied connection %.2fs", time.Since(t0).Seconds())
	reaches(t, r, "B dns-udp", "udp", "8.8.8.8:53", "probe")
	if seen, _, _ := netA.counts(); len(seen) != len(after) {
		t.Errorf("the old namespace's listeners saw the restored guest: %q", seen[len(after):])
	}
}

// TestNetworkAttachesOnRestore restores a snapshot of a machine without
// a network (restricted user networking: a base image) behind a TAP, and
// a networked one without: the NIC is the same device on both.
func TestNetworkAttachesOnRestore(t *testing.T) {
	net1 := newGuestNet(t, "C")
	b := newTestBackend(t)
	probe := buildNetprobe(t)
	acquireGuest(t)
	ctx := context.Background()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: "nonet", Dir: t.TempDir(), MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	defer m.Destroy(ctx)
	uploadNetprobe(t, m, probe)
	fails(t, m, "/tmp/netprobe", "tcp", "1.2.3.4:443")
	snap, err := m.Snapshot(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	m.Destroy(ctx)
	r, err := b.Restore(ctx, vmm.Spec{SessionID: "nonet-r", Dir: t.TempDir(), Network: &vmm.Network{Tap: net1.TapFile()}}, snap)
	if err != nil {
		t.Fatalf("restore with a network: %v", err)
	}
	defer r.Destroy(ctx)
	reaches(t, r, "C 1.2.3.4:443", "tcp", "1.2.3.4:443")
	if out, _ := execRun(t, r, "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 10.0.2.2") {
		t.Errorf("resolv.conf after a restore with a network = %q", out)
	}
	snap2, err := r.Snapshot(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	r.Destroy(ctx)
	r2, err := b.Restore(ctx, vmm.Spec{SessionID: "nonet-r2", Dir: t.TempDir()}, snap2)
	if err != nil {
		t.Fatalf("restore without a network: %v", err)
	}
	defer r2.Destroy(ctx)
	fails(t, r2, "/tmp/netprobe", "tcp", "1.2.3.4:443")
}

// TestNetworkBootTime compares boot→ready with and without a machine
// network (namespace, TAP and rules made before the boot, counted in).
// It runs only with ENGRAMS_QEMU_NET_BENCH=<runs>, one guest at a time,
// alternating the two, and logs the medians.
func TestNetworkBootTime(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("ENGRAMS_QEMU_NET_BENCH"))
	if runs <= 0 {
		t.Skip("set ENGRAMS_QEMU_NET_BENCH=<runs> to measure")
	}
	if err := vmnet.Available(); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	b := newTestBackend(t)
	acquireGuest(t)
	acquireGuest(t) // alone
	ctx := context.Background()
	times := map[bool][]float64{}
	for i := range 2 * runs {
		withNet := i%2 == 1
		t0 := time.Now()
		spec := vmm.Spec{SessionID: fmt.Sprintf("netbench-%d", i), Dir: t.TempDir(), MemoryMiB: 256, VCPUs: 1}
		var n *vmnet.Net
		if withNet {
			var err error
			if n, err = vmnet.New(ctx, vmnet.Config{}); err != nil {
				t.Fatal(err)
			}
			spec.Network = &vmm.Network{Tap: n.TapFile()}
		}
		m, err := b.Boot(ctx, spec)
		if err != nil {
			t.Fatalf("boot: %v", err)
		}
		times[withNet] = append(times[withNet], time.Since(t0).Seconds())
		m.Destroy(ctx)
		if n != nil {
			n.Close()
		}
	}
	for _, withNet := range []bool{false, true} {
		v := times[withNet]
		t.Logf("network=%v boot→ready n=%d median=%.2fs min=%.2fs max=%.2fs", withNet, len(v), pct(v, 50), pct(v, 0), pct(v, 100))
	}
}
