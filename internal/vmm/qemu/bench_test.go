package qemu

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// TestBench measures boot→ready, snapshot time and size, restore→first
// exec and RSS for 256 MiB and 1 GiB guests. It runs only with
// ENGRAMS_QEMU_BENCH=<runs per size>, one guest at a time, and logs
// median and p95 of each figure.
func TestBench(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("ENGRAMS_QEMU_BENCH"))
	if runs <= 0 {
		t.Skip("set ENGRAMS_QEMU_BENCH=<runs> to run the benchmark")
	}
	b := newTestBackend(t)
	acquireGuest(t)
	acquireGuest(t) // alone: timings are not shared with another guest
	for _, mem := range []int{256, 1024} {
		s := map[string][]float64{}
		for i := 0; i < runs; i++ {
			benchOnce(t, b, mem, i, s)
		}
		for _, k := range []string{"boot_s", "snapshot_s", "snapshot_mb", "restore_exec_s", "ratio", "qemu_rss_mb", "daemon_rss_mb"} {
			v := s[k]
			t.Logf("mem=%dMiB %-15s n=%d median=%.3f p95=%.3f min=%.3f max=%.3f", mem, k, len(v), pct(v, 50), pct(v, 95), pct(v, 0), pct(v, 100))
		}
	}
}

func benchOnce(t *testing.T, b *Backend, mem, i int, s map[string][]float64) {
	ctx := context.Background()
	t0 := time.Now()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: fmt.Sprintf("bench-%d-%d", mem, i), Dir: t.TempDir(), MemoryMiB: mem, VCPUs: 1})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	defer m.Destroy(ctx)
	boot := time.Since(t0).Seconds()
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	r, err := cl.Ready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s["qemu_rss_mb"] = append(s["qemu_rss_mb"], rssMB(t, fmt.Sprintf("/proc/%d/status", m.Info().PID)))
	s["daemon_rss_mb"] = append(s["daemon_rss_mb"], guestRSS(t, m, r.PID))
	snapDir := t.TempDir()
	t0 = time.Now()
	snap, err := m.Snapshot(ctx, snapDir)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	s["snapshot_s"] = append(s["snapshot_s"], time.Since(t0).Seconds())
	var size int64 // allocated bytes: the RAM file is sparse
	for _, role := range []string{"memory", "state"} {
		if st, err := os.Stat(snap.Files[role]); err == nil {
			size += st.Sys().(*syscall.Stat_t).Blocks * 512
		}
	}
	s["snapshot_mb"] = append(s["snapshot_mb"], float64(size)/1e6)
	if err := m.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	rm, err := b.Restore(ctx, vmm.Spec{SessionID: "bench-r", Dir: t.TempDir()}, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer rm.Destroy(ctx)
	rc := guestapi.NewClient(rm.Dial)
	defer rc.Close()
	if _, err := rc.Exec(ctx, guestapi.ExecStart{Argv: []string{"true"}}, nil, nil, nil); err != nil {
		t.Fatalf("first exec: %v", err)
	}
	restore := time.Since(t0).Seconds()
	s["boot_s"] = append(s["boot_s"], boot)
	s["restore_exec_s"] = append(s["restore_exec_s"], restore)
	s["ratio"] = append(s["ratio"], restore/boot)
	if err := rm.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
}

func rssMB(t *testing.T, statusFile string) float64 {
	b, err := os.ReadFile(statusFile)
	if err != nil {
		t.Fatal(err)
	}
	return parseRSS(string(b))
}

func parseRSS(status string) float64 {
	for _, l := range strings.Split(status, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func guestRSS(t *testing.T, m vmm.Machine, pid int) float64 {
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	var out strings.Builder
	_, err := cl.Exec(context.Background(), guestapi.ExecStart{Argv: []string{"cat", fmt.Sprintf("/proc/%d/status", pid)}}, nil, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	return parseRSS(out.String())
}

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := (p*len(s) + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
