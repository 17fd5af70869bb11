package e2e

import (
	"context"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// TestBench is the project's one bench: on QEMU (TCG here) it measures
// create (from an image's base snapshot, from a harness-warm base, cold
// boot), the exec round trip, first and later suspends (time, bytes, share
// of memory), resume on the same and on another host, a new task's first
// agent event and each agent turn per harness, and the peak RSS of each
// process, and prints one table: each row's median and p95 and the row it
// is compared with, measured in the same run. Figures come from here,
// never from timed assertions.
//
//	ENGRAMS_BENCH=1 go test ./internal/e2e -run '^TestBench$' -timeout 60m -v
//
// ENGRAMS_BENCH_N sets the samples of each row (default 5; 2 for a quick
// run); ENGRAMS_BENCH_JSON=path also writes the table as JSON, which
// TestBenchCompare prints beside another.
func TestBench(t *testing.T) {
	requireBench(t)
	requireQEMU(t)
	n := envInt("ENGRAMS_BENCH_N", 5)
	tb := &benchTable{Started: time.Now()}
	sections := []struct {
		name, group string
		run         func(t *testing.T)
	}{
		{"images_and_agents", groupCreate, func(t *testing.T) {
			a := startAgentEnv(t, claudeCase)
			benchCreate(t, a, tb, n)
			benchExecQEMU(t, a, tb, n)
			benchAgents(t, a, tb, n)
		}},
		{"snapshots", groupSuspend, func(t *testing.T) { benchSnapshots(t, tb, n) }},
	}
	for _, s := range sections {
		if !t.Run(s.name, s.run) {
			tb.unavailable(s.group, "section "+s.name, "it failed part way; its rows above are what it measured (see the log)")
		}
	}
	tb.report(t)
}

// benchCreate adds the create rows: create -> Active from the image's base
// snapshot and cold booted (the default root image, the same memory), n of
// each, alternating, each session deleted before the next.
func benchCreate(t *testing.T, a *agentEnv, tb *benchTable, n int) {
	var fromBase, cold []time.Duration
	for range n {
		fromBase = append(fromBase, createActive(t, a.imageEnv, 1, apiv1.SessionSpec{Image: agentImage})...)
		cold = append(cold, createActive(t, a.imageEnv, 1, apiv1.SessionSpec{MemoryMiB: 1024})...)
	}
	const coldRow = "create -> active, cold boot (1 GiB)"
	tb.durations(groupCreate, "create -> active from the image's base snapshot", fromBase, coldRow, "Debian with git, 1 GiB")
	benchCreateHarnessWarm(t, a, tb, n, coldRow)
	tb.durations(groupCreate, coldRow, cold, "", "default root image")
}

// benchCreateHarnessWarm is the hook for create -> active from a base
// snapshot taken with a harness's agent CLI started (issue 28, item 4).
// Until that exists the row says so, and never shows a figure.
func benchCreateHarnessWarm(_ *testing.T, _ *agentEnv, tb *benchTable, _ int, _ string) {
	tb.unavailable(groupCreate, "create -> active from a harness-warm base",
		"no base snapshot per image and harness yet (issue 28, item 4): fill in benchCreateHarnessWarm")
}

// benchExecQEMU adds the exec rows: `true` through the API (POST, NDJSON)
// into a session from the image, against the guest's own fork+exec of
// `true` (the mean of 50, timed in the guest), alternating.
func benchExecQEMU(t *testing.T, a *agentEnv, tb *benchTable, n int) {
	ctx := context.Background()
	s, err := a.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: agentImage}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	defer a.c.Sessions().Delete(ctx, s.ID, true) //nolint:errcheck // the env's end reaps it too
	var viaAPI, inGuest []time.Duration
	for i := range max(20, 10*n) {
		t0 := time.Now()
		if code, err := a.c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil || code != 0 {
			t.Fatalf("exec: %d %v", code, err)
		}
		viaAPI = append(viaAPI, time.Since(t0))
		if i%2 == 0 {
			out := execOut(t, a.c, s.ID, `s=$(date +%s%N); for i in $(seq 50); do /bin/true; done; e=$(date +%s%N); echo $(((e-s)/50))`)
			ns, err := strconv.ParseInt(out, 10, 64)
			if err != nil {
				t.Fatalf("in-guest timing %q: %v", out, err)
			}
			inGuest = append(inGuest, time.Duration(ns))
		}
	}
	const guestRow = "fork+exec `true` in the guest (mean of 50)"
	tb.durations(groupExec, "exec `true` round trip via API (POST)", viaAPI, guestRow, "session from the image")
	tb.durations(groupExec, guestRow, inGuest, "", "timed by the guest's clock")
}

// guestDaemonHWM is the guest daemon's peak RSS (VmHWM) in session id, read
// in the guest; 0, logged, when it cannot be read.
func guestDaemonHWM(t *testing.T, c *client.Client, id string) int64 {
	t.Helper()
	out, code := guestRun(context.Background(), c, id, "sh", "-c", `for d in /proc/[0-9]*; do read -r c < $d/comm 2>/dev/null || continue; [ "$c" = engrams-guest ] || continue; while read -r k v _; do [ "$k" = VmHWM: ] && echo "$v"; done < $d/status; done; true`)
	kb, err := strconv.ParseInt(strings.Fields(out + " 0")[0], 10, 64)
	if code != 0 || err != nil || kb == 0 {
		t.Logf("guest daemon VmHWM in %s: exit %d, %q", id, code, out)
		return 0
	}
	return kb << 10
}

// guestDaemonRow adds a row of the guest daemon's peaks, those read.
func guestDaemonRow(tb *benchTable, name string, hwm []int64, base, extra string) {
	hwm = slices.DeleteFunc(hwm, func(v int64) bool { return v == 0 })
	if len(hwm) == 0 {
		tb.unavailable(groupRSS, name, "the guest daemon's /proc/PID/status could not be read in the guest (see the log)")
		return
	}
	tb.sizes(groupRSS, name, hwm, base, extra)
}

// watchVMMs samples the peak RSS (VmHWM) of each QEMU process under dir
// until stopped, which returns them (and may be called again).
func watchVMMs(dir string) (stop func() []int64) {
	peak := map[int]int64{}
	end := every(200*time.Millisecond, func() {
		for _, pid := range vmmPIDs(dir) {
			peak[pid] = max(peak[pid], hwmBytes(pid))
		}
	})
	return sync.OnceValue(func() []int64 {
		end()
		return slices.Collect(maps.Values(peak))
	})
}

// every runs fn now and then every d until stopped.
func every(d time.Duration, fn func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			fn()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
