package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// hostileCase is one attack and the bound that must stop it.
type hostileCase struct {
	attack, bound string
	check         func(t *testing.T, c *hostileCoord, g *standIn, sid string, ran time.Duration)
}

func hostileCases() []hostileCase {
	return []hostileCase{
		{attack: attackLine, bound: "harness_event_line", check: func(t *testing.T, c *hostileCoord, _ *standIn, sid string, _ time.Duration) {
			waitUntil(t, sid+": event 1 relayed", func() bool { taken, _ := c.state(sid); return slices.Contains(taken, 1) })
		}},
		{attack: attackHuge, bound: "harness_event_line", check: func(t *testing.T, c *hostileCoord, _ *standIn, sid string, _ time.Duration) {
			waitUntil(t, sid+": events 1 and 3 relayed, the 1 GiB one skipped", func() bool {
				taken, _ := c.state(sid)
				return slices.Equal(taken, []int64{1, 3})
			})
		}},
		{attack: attackFlood, bound: "harness_event_rate", check: func(t *testing.T, c *hostileCoord, _ *standIn, sid string, ran time.Duration) {
			taken, _ := c.state(sid)
			if most := 2000 + int(200*ran.Seconds()) + 256; len(taken) > most {
				t.Errorf("%s: %d events relayed in %v of a 10,000/s flood, over the rate's %d", sid, len(taken), ran, most)
			}
			t.Logf("%s: %d events relayed in %v of a 10,000/s flood", sid, len(taken), ran.Round(time.Millisecond))
		}},
		{attack: attackRewind, bound: "harness_event_rewinds"},
		{attack: attackTunnelHdr, bound: "tunnel_header"},
		{attack: attackTunnels, bound: "tunnels", check: func(t *testing.T, _ *hostileCoord, g *standIn, sid string, _ time.Duration) {
			if n := g.maxTunnels(); n != 32 {
				t.Errorf("%s: the guest had %d tunnels served at once, want the bound, 32", sid, n)
			}
		}},
		{attack: attackListing, bound: "file_list"},
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execStats are the bystanders' commands during an attack.
type execStats struct {
	mu      sync.Mutex
	n       int
	slowest time.Duration
	errs    []error
}

// keepExecuting runs a command in each bystander every 50 ms until stop.
func keepExecuting(c *hostileCoord, sids []string) (stop func() *execStats) {
	st := &execStats{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, sid := range sids {
		wg.Go(func() {
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
				d, err := c.exec(cctx, sid)
				ccancel()
				st.mu.Lock()
				if err != nil && ctx.Err() == nil {
					st.errs = append(st.errs, err)
				} else if err == nil {
					st.n, st.slowest = st.n+1, max(st.slowest, d)
				}
				st.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	return func() *execStats { cancel(); wg.Wait(); return st }
}

// listEndless asks sid's guest for a listing through the host and reads
// what comes until it breaks off.
func listEndless(t *testing.T, c *hostileCoord, sid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.hostCall(ctx, http.MethodGet, "/v1/machines/"+sid+"/guest"+guestapi.PathFileList+"?path=/", nil)
	if err != nil {
		t.Fatalf("list in %s: %v", sid, err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n > guestapi.MaxFileListBytes+64<<10 {
		t.Errorf("an endless listing through the host: read %d bytes, %v; want it cut at %d", n, err, guestapi.MaxFileListBytes)
	}
}

// TestHostileGuests runs a host agent process under each attack a guest
// can make on its side of the guest API (an endless event line, a 1 GiB
// event, 10,000 events a second, a rewind loop, endless tunnel answers,
// every tunnel answered at once, an endless listing), one at a time and
// then all at once. Each leaves a report naming its bound, two other
// sessions on the host keep answering exec throughout, and the agent's
// resident memory peak (VmHWM) stays under hostileRSSBound.
func TestHostileGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a host agent process under guest attacks for about a minute; -short skips it")
	}
	t.Parallel()
	sockDir, err := os.MkdirTemp("", "eh-") // short: a Unix socket path has 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	c, url := newHostileCoord(t)
	addGuest := func(sid, attack string) *standIn {
		g := &standIn{attack: attack}
		stop, err := serveStandIn(filepath.Join(sockDir, sid+".sock"), g)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return g
	}
	ch := startChild(t, url, sockDir)
	waitUntil(t, "the host agent to connect", func() bool { _, ok := c.srv.Transport("host-1"); return ok })
	bystanders := []string{"calm-1", "calm-2"}
	for _, sid := range bystanders {
		addGuest(sid, calm)
		c.start(t, sid, false)
	}
	time.Sleep(time.Second)
	idle, _ := ch.phasePeak()
	t.Logf("host agent idle with 2 sessions: VmRSS peak %.1f MiB", mib(idle))

	for _, tc := range hostileCases() {
		runAttacks(t, c, ch, bystanders, addGuest, "one-", []hostileCase{tc}, 3*time.Second)
	}
	runAttacks(t, c, ch, bystanders, addGuest, "all-", hostileCases(), 10*time.Second)

	hwm := procStatus(ch.cmd.Process.Pid, "VmHWM")
	t.Logf("host agent VmHWM over the whole test: %.1f MiB (bound %d MiB)", mib(hwm), hostileRSSBound>>20)
	if hwm == 0 || hwm > hostileRSSBound {
		t.Errorf("host agent VmHWM %.1f MiB, over the bound of %d MiB", mib(hwm), hostileRSSBound>>20)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// runAttacks starts one machine per case at once, keeps the bystanders
// executing, lets the attacks run at least d and until each case's bound
// is reported, checks them and destroys the machines.
func runAttacks(t *testing.T, c *hostileCoord, ch *child, bystanders []string, addGuest func(sid, attack string) *standIn,
	prefix string, cases []hostileCase, d time.Duration) {
	t.Helper()
	stopExec := keepExecuting(c, bystanders)
	t0 := time.Now()
	guests := map[string]*standIn{}
	for _, tc := range cases {
		sid := prefix + tc.attack
		guests[sid] = addGuest(sid, tc.attack)
		c.start(t, sid, true)
		if tc.attack == attackListing {
			listEndless(t, c, sid)
		}
	}
	for _, tc := range cases {
		sid := prefix + tc.attack
		waitUntil(t, sid+": a report of "+tc.bound, func() bool {
			_, b := c.state(sid)
			return slices.Contains(b, tc.bound) || ch.wasKilled()
		})
	}
	if ch.wasKilled() {
		t.Fatalf("%s%s: the host agent passed %d MiB and was killed", prefix, cases[0].attack, killRSS>>20)
	}
	time.Sleep(time.Until(t0.Add(d)))
	ran := time.Since(t0)
	for _, tc := range cases {
		if tc.check != nil {
			tc.check(t, c, guests[prefix+tc.attack], prefix+tc.attack, ran)
		}
	}
	st := stopExec()
	peak, killed := ch.phasePeak()
	for _, tc := range cases {
		c.destroy(t, prefix+tc.attack)
	}
	name := prefix + cases[0].attack
	if len(cases) > 1 {
		name = fmt.Sprintf("%s(%d attacks)", prefix, len(cases))
	}
	t.Logf("%-16s VmRSS peak %6.1f MiB; bystanders ran %d commands, slowest %v, %d failed", name, mib(peak), st.n, st.slowest.Round(time.Millisecond), len(st.errs))
	if killed {
		t.Fatalf("%s: the host agent passed %d MiB and was killed", name, killRSS>>20)
	}
	if len(st.errs) > 0 || st.n == 0 {
		t.Errorf("%s: bystanders ran %d commands; failures: %v", name, st.n, st.errs[:min(len(st.errs), 3)])
	}
}
