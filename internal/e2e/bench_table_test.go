package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchRow is one line of the bench table: a measure's median and p95 over
// its samples, the row it is compared with (its baseline, measured in the
// same run) and what else is worth knowing of it (bytes, share of memory).
// A row that cannot be measured yet says why in NA and has no figures.
type benchRow struct {
	Group  string  `json:"group"` // one of benchGroups: where the row is printed
	Name   string  `json:"name"`
	Unit   string  `json:"unit"` // "s" or "MiB"
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	// Baseline names the row this one is compared with.
	Baseline       string  `json:"baseline,omitempty"`
	BaselineMedian float64 `json:"baseline_median,omitempty"`
	Ratio          float64 `json:"ratio,omitempty"` // median / the baseline's median
	Extra          string  `json:"extra,omitempty"`
	NA             string  `json:"not_available,omitempty"`
}

// The groups of the bench table, in the order they are printed.
const (
	groupCreate  = "create"
	groupExec    = "exec"
	groupSuspend = "suspend"
	groupResume  = "resume"
	groupAgent   = "agent"
	groupRSS     = "rss"
)

var benchGroups = []string{groupCreate, groupExec, groupSuspend, groupResume, groupAgent, groupRSS}

// benchTable collects the rows of one run in the order they were added.
type benchTable struct {
	mu   sync.Mutex
	Rows []benchRow `json:"rows"`
	// Started and Took are when the run started and how long it took.
	Started time.Time `json:"started"`
	Took    string    `json:"took"`
}

// durations adds a row of durations, compared with the row named base
// (which may come later) when base is not "".
func (tb *benchTable) durations(group, name string, d []time.Duration, base, extra string) {
	s := make([]float64, len(d))
	for i, v := range d {
		s[i] = v.Seconds()
	}
	tb.add(benchRow{Group: group, Name: name, Unit: "s", N: len(s), Median: pct(s, 50), P95: pct(s, 95), Baseline: base, Extra: extra})
}

// sizes adds a row of byte counts, shown in MiB.
func (tb *benchTable) sizes(group, name string, b []int64, base, extra string) {
	s := make([]float64, len(b))
	for i, v := range b {
		s[i] = mib(v)
	}
	tb.add(benchRow{Group: group, Name: name, Unit: "MiB", N: len(s), Median: pct(s, 50), P95: pct(s, 95), Baseline: base, Extra: extra})
}

// unavailable adds a row that cannot be measured, and why: never a figure.
func (tb *benchTable) unavailable(group, name, why string) {
	tb.add(benchRow{Group: group, Name: name, NA: why})
}

func (tb *benchTable) add(r benchRow) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.Rows = append(tb.Rows, r)
}

// resolve puts the rows in their groups' order and fills each row's
// baseline median and ratio from the row it names.
func (tb *benchTable) resolve() {
	slices.SortStableFunc(tb.Rows, func(a, b benchRow) int {
		return slices.Index(benchGroups, a.Group) - slices.Index(benchGroups, b.Group)
	})
	by := map[string]benchRow{}
	for _, r := range tb.Rows {
		by[r.Name] = r
	}
	for i := range tb.Rows {
		r := &tb.Rows[i]
		b, ok := by[r.Baseline]
		if r.Baseline == "" || r.NA != "" {
			continue
		}
		if !ok || b.NA != "" || b.N == 0 {
			r.Extra = strings.TrimSpace(r.Extra + " (baseline not measured)")
			continue
		}
		r.BaselineMedian = b.Median
		if b.Median > 0 {
			r.Ratio = r.Median / b.Median
		}
	}
}

// String is the table as printed, its columns as wide as their widest
// cell.
func (tb *benchTable) String() string {
	nameW, baseW := len("measure"), len("baseline")
	for _, r := range tb.Rows {
		nameW, baseW = max(nameW, len(r.Name)), max(baseW, len(r.Baseline))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s %3s %10s %10s  %-*s %10s %7s  %s\n", nameW, "measure", "n", "median", "p95", baseW, "baseline", "base med", "ratio", "extra")
	for _, r := range tb.Rows {
		if r.NA != "" {
			fmt.Fprintf(&b, "%-*s %3s %10s %10s  not available: %s\n", nameW, r.Name, "-", "-", "-", r.NA)
			continue
		}
		base, bm, ratio := "-", "-", "-"
		if r.Baseline != "" {
			base = r.Baseline
		}
		if r.BaselineMedian != 0 {
			bm, ratio = fmtValue(r.BaselineMedian, r.Unit), fmt.Sprintf("%.2f", r.Ratio)
		}
		fmt.Fprintf(&b, "%-*s %3d %10s %10s  %-*s %10s %7s  %s\n", nameW, r.Name, r.N, fmtValue(r.Median, r.Unit), fmtValue(r.P95, r.Unit), baseW, base, bm, ratio, r.Extra)
	}
	return b.String()
}

// fmtValue prints seconds under one as milliseconds.
func fmtValue(v float64, unit string) string {
	switch {
	case unit == "s" && v < 1:
		return fmt.Sprintf("%.1fms", v*1000)
	case unit == "s":
		return fmt.Sprintf("%.2fs", v)
	default:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
}

// report prints the table and, with ENGRAMS_BENCH_JSON=path, writes it
// there as JSON for TestBenchCompare.
func (tb *benchTable) report(t *testing.T) {
	t.Helper()
	tb.resolve()
	tb.Took = time.Since(tb.Started).Round(time.Second).String()
	fmt.Printf("\n== engrams bench (QEMU, this machine's accelerator; took %s)\n%s== end of bench\n", tb.Took, tb)
	if p := os.Getenv("ENGRAMS_BENCH_JSON"); p != "" {
		b, err := json.MarshalIndent(tb, "", "  ")
		if err == nil {
			err = os.WriteFile(p, b, 0o644)
		}
		if err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
}

// requireBench skips a benchmark unless ENGRAMS_BENCH is set.
func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv("ENGRAMS_BENCH") == "" {
		t.Skip("benchmark: set ENGRAMS_BENCH=1 to run")
	}
}

// TestBenchCompare prints two tables written by TestBench
// (ENGRAMS_BENCH_JSON) side by side, rows matched by name:
// ENGRAMS_BENCH_BEFORE and ENGRAMS_BENCH_AFTER name the files. With
// ENGRAMS_BENCH_BEFORE alone it prints that table again.
func TestBenchCompare(t *testing.T) {
	before, after := os.Getenv("ENGRAMS_BENCH_BEFORE"), os.Getenv("ENGRAMS_BENCH_AFTER")
	switch {
	case before == "":
		t.Skip("set ENGRAMS_BENCH_BEFORE and ENGRAMS_BENCH_AFTER to two files written with ENGRAMS_BENCH_JSON")
	case after == "":
		fmt.Print(readBenchTable(t, before))
	default:
		fmt.Print(compareTables(readBenchTable(t, before), readBenchTable(t, after)))
	}
}

func readBenchTable(t *testing.T, path string) *benchTable {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tb benchTable
	if err := json.Unmarshal(raw, &tb); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &tb
}

// compareTables lists every row of either table, in before's order then
// after's new rows: median, p95 and ratio to baseline before and after,
// and after's median over before's.
func compareTables(before, after *benchTable) string {
	nameW := len("measure")
	for _, r := range append(slices.Clone(before.Rows), after.Rows...) {
		nameW = max(nameW, len(r.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s %10s %10s %7s | %10s %10s %7s | %7s\n", nameW, "measure", "median", "p95", "ratio", "median", "p95", "ratio", "after/before")
	fmt.Fprintf(&b, "%-*s %29s | %29s |\n", nameW, "", "before ("+before.Started.Format("2006-01-02 15:04")+")", "after ("+after.Started.Format("2006-01-02 15:04")+")")
	am := map[string]benchRow{}
	for _, r := range after.Rows {
		am[r.Name] = r
	}
	seen := map[string]bool{}
	cell := func(r benchRow, ok bool) string {
		switch {
		case !ok:
			return fmt.Sprintf("%10s %10s %7s", "absent", "", "")
		case r.NA != "":
			return fmt.Sprintf("%10s %10s %7s", "n/a", "", "")
		}
		ratio := "-"
		if r.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		return fmt.Sprintf("%10s %10s %7s", fmtValue(r.Median, r.Unit), fmtValue(r.P95, r.Unit), ratio)
	}
	line := func(name string, x benchRow, xok bool, y benchRow, yok bool) {
		change := "-"
		if xok && yok && x.NA == "" && y.NA == "" && x.Median > 0 {
			change = fmt.Sprintf("%.2f", y.Median/x.Median)
		}
		fmt.Fprintf(&b, "%-*s %s | %s | %7s\n", nameW, name, cell(x, xok), cell(y, yok), change)
	}
	for _, r := range before.Rows {
		seen[r.Name] = true
		y, ok := am[r.Name]
		line(r.Name, r, true, y, ok)
	}
	for _, r := range after.Rows {
		if !seen[r.Name] {
			line(r.Name, benchRow{}, false, r, true)
		}
	}
	return b.String()
}
