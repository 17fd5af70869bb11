package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/testutil"
)

// netns is a network namespace joined to the root namespace by one veth
// pair with private addresses: all its traffic stays on that pair.
type netns struct {
	name     string
	rootVeth string // the root namespace's end
	rootIP   string // rootVeth's address: where the coordinator listens
}

// ipCmd runs `ip args...` and returns its combined output on failure.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// requireNetns skips (fails under CI) when this machine cannot make
// network namespaces and veth pairs.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "network namespaces need root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testutil.SkipOrFail(t, "no `ip` command (iproute2): %v", err)
	}
}

// newNetns creates a namespace and a veth pair with a random private /30
// (10.200-249.x.y), and removes both when the test ends.
func newNetns(t *testing.T) *netns {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	n := &netns{name: "egt" + id, rootVeth: "egc" + id}
	nsVeth := "egh" + id
	used, _ := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	var net24 string // a 10.x.y.0/24 no interface here has an address in
	for net24 == "" || strings.Contains(string(used), " "+net24) {
		net24 = fmt.Sprintf("10.%d.%d.", 200+mrand.IntN(50), mrand.IntN(256))
	}
	sub := 4 * mrand.IntN(63)
	n.rootIP = net24 + strconv.Itoa(sub+1)
	nsIP := net24 + strconv.Itoa(sub+2)
	if err := ipCmd("netns", "add", n.name); err != nil {
		testutil.SkipOrFail(t, "cannot create a network namespace here: %v", err)
	}
	t.Cleanup(func() {
		_ = ipCmd("link", "del", n.rootVeth) // takes its peer along
		if err := ipCmd("netns", "del", n.name); err != nil {
			t.Errorf("remove namespace: %v", err)
		}
	})
	steps := [][]string{
		{"link", "add", n.rootVeth, "type", "veth", "peer", "name", nsVeth},
		{"link", "set", nsVeth, "netns", n.name},
		{"addr", "add", n.rootIP + "/30", "dev", n.rootVeth},
		{"link", "set", n.rootVeth, "up"},
		{"-n", n.name, "addr", "add", nsIP + "/30", "dev", nsVeth},
		{"-n", n.name, "link", "set", nsVeth, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatalf("set up namespace %s: %v", n.name, err)
		}
	}
	return n
}

// cut takes the link down (up false) or brings it back.
func (n *netns) cut(t *testing.T, down bool) {
	t.Helper()
	state := "up"
	if down {
		state = "down"
	}
	if err := ipCmd("link", "set", n.rootVeth, state); err != nil {
		t.Fatal(err)
	}
}

// TestHostCutOffFromCoordinator: host a runs in its own network namespace,
// reaching the coordinator over a veth pair; host b runs beside the
// coordinator. With a committed snapshot, a's session keeps running; then
// the pair is cut. a's lease expires and it pauses the session's machine
// before the coordinator declares a lost; the session goes back to its
// snapshot and resumes on b; at no sample is it away from a (a lost, or
// placed elsewhere) while a's machine can run. When the link returns, a
// destroys the machine it no longer owns and the session stays on b.
func TestHostCutOffFromCoordinator(t *testing.T) {
	t.Parallel()
	requireNetns(t)
	ctx := context.Background()
	ns := newNetns(t)
	st := openSQLite(t)
	credsA, credsB := credentials(t, st, "cut-a"), credentials(t, st, "cut-b")
	ln, err := net.Listen("tcp", net.JoinHostPort(ns.rootIP, "0"))
	if err != nil {
		t.Fatalf("listen on the veth address: %v", err)
	}
	lostAfter := 3 * time.Second
	r := serveReplica(t, ln, st, "", coordinator.Config{HeartbeatInterval: 250 * time.Millisecond, HostLostAfter: lostAfter})
	blobs, dirA, dirB := shortTempDir(t), shortTempDir(t), shortTempDir(t)
	startHostWrapped(t, []string{"ip", "netns", "exec", ns.name}, r.URL, credsA.HostToken, dirA, "--blob-dir", blobs)
	c := newClient(r.URL, credsA.Token)
	waitHostReady(t, c, credsA.HostID)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" || s.HostID != credsA.HostID {
		t.Fatalf("create: %+v %v (host log %s)", s, err, hostLog(dirA))
	}
	execOut(t, c, s.ID, "echo kept > marker")
	snap, err := c.Sessions().Snapshot(ctx, s.ID)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// A child of the guest, which a pause must stop too.
	execOut(t, c, s.ID, "sh -c 'while :; do date +%s%N > tick; sleep 0.05; done' >/dev/null 2>&1 &")
	startHostProcess(t, r.URL, credsB.HostToken, dirB, "--blob-dir", blobs)
	waitHostReady(t, c, credsB.HostID)

	watch := watchNeverTwice(t, c, s.ID, credsA.HostID, "process", dirA)
	ns.cut(t, true)
	paused, lost := pausedThenLost(t, c, credsA.HostID, dirA, s.ID, lostAfter+30*time.Second)
	t.Logf("after the cut: a's machine paused at %s, a declared lost at %s (HostLostAfter %s)",
		paused.Round(time.Millisecond), lost.Round(time.Millisecond), lostAfter)
	eventually(t, 30*time.Second, "session back at its snapshot", func() (bool, string) {
		got, err := c.Sessions().Get(ctx, s.ID)
		return err == nil && got.State == "idle", describe(got)
	})
	if out := execOut(t, c, s.ID, "cat marker"); out != "kept" {
		t.Fatalf("resumed session lost its snapshot's file: %q", out)
	}
	got, _ := c.Sessions().Get(ctx, s.ID)
	if got.State != "active" || got.HostID != credsB.HostID || got.HeadSnapshot != snap.ID {
		t.Fatalf("after the cut: %s; want active on b from %s", describe(got), snap.ID)
	}
	if n := watch.stop(t); n == 0 {
		t.Fatal("the watcher never saw the session away from a")
	}

	ns.cut(t, false)
	eventually(t, 60*time.Second, "a back, its unowned machine destroyed", func() (bool, string) {
		h, _ := c.Hosts().Get(ctx, credsA.HostID)
		n := guestProcesses(dirA)
		return h.State == "ready" && n == 0, fmt.Sprintf("host a %s, %d guest processes", h.State, n)
	})
	if got, _ := c.Sessions().Get(ctx, s.ID); got.State != "active" || got.HostID != credsB.HostID {
		t.Fatalf("after a came back: %s; want still active on b", describe(got))
	}
	execOut(t, c, s.ID, "true")
}

// pausedThenLost waits until host's machine of session sid (process
// backend, under dir) is paused or gone and the API shows host lost, and
// fails the test unless the pause was seen first (each poll reads the
// host's state before the machine's, so a tie counts as lost first). It
// returns when each was first seen, from its call.
func pausedThenLost(t *testing.T, c *client.Client, hostID, dir, sid string, d time.Duration) (paused, lost time.Duration) {
	t.Helper()
	start := time.Now()
	eventually(t, d, "the cut-off host pauses its machine and is declared lost", func() (bool, string) {
		h, err := c.Hosts().Get(context.Background(), hostID)
		if err == nil && h.State == "lost" && lost == 0 {
			lost = time.Since(start)
		}
		live, why := machineLive("process", dir, sid)
		if !live && paused == 0 {
			paused = time.Since(start)
		}
		return lost > 0 && paused > 0, fmt.Sprintf("host %s %v; machine: %s", h.State, err, why)
	})
	if paused >= lost {
		t.Fatalf("host %s was declared lost (%s) before its machine was seen paused (%s)", hostID, lost, paused)
	}
	return paused, lost
}
