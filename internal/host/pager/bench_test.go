package pager

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchMappedMemory measures what a guest pays for lazily served
// memory: a child maps 256 MiB shared and reads, then writes, one byte of
// every page, through the pager (chunks from an in-memory source: the
// pager's own cost, not the blob store's) and, as the baseline in the
// same run, a file in /dev/shm (memory already local). Medians and p95
// of 5 runs each, alternated. ENGRAMS_BENCH=1 runs it.
func TestBenchMappedMemory(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") == "" {
		t.Skip("benchmark: set ENGRAMS_BENCH=1 to run")
	}
	p := mountPager(t)
	const size = 256 << 20
	data, m := memory(size/testCS, nil)
	var lazyTouch, lazyFill, localTouch, localFill []time.Duration
	for i := range 5 {
		name := fmt.Sprintf("bench%d", i)
		f, err := p.Add(name, filepath.Join(t.TempDir(), name), m, &fakeSource{data: data, reads: make([]atomic.Int32, len(m.Chunks))})
		if err != nil {
			t.Fatal(err)
		}
		mm := startMapper(t, f.Path(), size)
		lazyTouch = append(lazyTouch, nsOf(t, mm.do(t, "touch")))
		lazyFill = append(lazyFill, nsOf(t, mm.do(t, "fill")))
		local := filepath.Join("/dev/shm", "engrams-pager-bench-"+name)
		if err := os.WriteFile(local, data, 0o600); err != nil {
			t.Fatal(err)
		}
		lm := startMapper(t, local, size)
		localTouch = append(localTouch, nsOf(t, lm.do(t, "touch")))
		localFill = append(localFill, nsOf(t, lm.do(t, "fill")))
		_ = os.Remove(local)
	}
	fmt.Printf("\n%-44s %10s %10s %10s\n", "256 MiB mapped shared, one byte per page", "median", "p95", "MB/s")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"read, served lazily (first touch)", lazyTouch}, {"read, local (baseline)", localTouch},
		{"write, served lazily (after the read)", lazyFill}, {"write, local (baseline)", localFill}} {
		med, p95 := quantile(r.ds, 0.5), quantile(r.ds, 0.95)
		fmt.Printf("%-44s %10s %10s %10.0f\n", r.name, med.Round(time.Millisecond), p95.Round(time.Millisecond), size/med.Seconds()/1e6)
	}
}

func nsOf(t *testing.T, s string) time.Duration {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("mapper answered %q", s)
	}
	return time.Duration(n)
}

// quantile is the q-th quantile (nearest rank) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
