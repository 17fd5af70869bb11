package vmnet

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
)

// TestRejoin: an agent that exited left a VMM (here a sleep holding the
// TAP as its fd 3) whose namespace lost its listeners, and whose rules
// are an older agent's (here: none at all); Rejoin from the VMM's pid
// finds the same namespace, writes the rules again, and new listeners and
// a new drop log there get the guest's traffic again. An fd that is no
// TAP is refused.
func TestRejoin(t *testing.T) {
	n := newTestNet(t)
	t.Parallel()
	old := listen(t, n, n.ProxyAddr().String())
	old.Close() // the old agent's listeners went with it
	nft, err := nftables.New(nftables.WithNetNSFd(n.ns.machine))
	if err != nil {
		t.Fatal(err)
	}
	nft.FlushRuleset()
	if err := nft.Flush(); err != nil {
		t.Fatalf("remove the rules: %v", err)
	}
	vmm := exec.Command("sleep", "120")
	vmm.ExtraFiles = []*os.File{n.TapFile()}
	if err := vmm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vmm.Process.Kill(); _ = vmm.Wait() })

	r, err := Rejoin(context.Background(), Config{}, vmm.Process.Pid, 3)
	if err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	if r.tapIndex != n.tapIndex {
		t.Errorf("rejoined TAP index %d, want %d", r.tapIndex, n.tapIndex)
	}
	proxy := listen(t, r, r.ProxyAddr().String())
	resolver := listenPacket(t, r, r.ResolverAddr().String())
	p := newPeer(t, r.TapFile())
	dst := netip.MustParseAddrPort("1.2.3.4:443")
	c := connect(t, p, proxy, 41000, dst)
	if got, err := OriginalDst(c); err != nil || got != dst {
		t.Errorf("original destination = %v, %v; want %v", got, err, dst)
	}
	barrier(t, p, resolver, 1)
	dl, err := r.Drops()
	if err != nil {
		t.Fatalf("drop log of the rejoined namespace: %v", err)
	}
	p.write(icmpEchoFrame(netip.MustParseAddr("1.1.1.1")))
	if drops, _, err := dl.Read(); err != nil || len(drops) != 1 || drops[0].Proto != protoICMPv4 {
		t.Errorf("drop log after the rejoin read %+v, %v; want the ping", drops, err)
	}

	if _, err := Rejoin(context.Background(), Config{}, vmm.Process.Pid, 0); err == nil || !strings.Contains(err.Error(), "no TAP") {
		t.Errorf("rejoin on the VMM's stdin: %v, want it refused as no TAP", err)
	}
	if _, err := Rejoin(context.Background(), Config{}, vmm.Process.Pid, 99); err == nil {
		t.Error("rejoin on an fd the VMM does not have succeeded")
	}
}
