package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/image/imagetest"
)

// TestBenchImages measures, on QEMU (TCG here): the enable time of the
// Debian image per stage (each enable with its own env, so nothing is
// reused) and re-enabling a ready digest; create from the base snapshot is
// TestBench's. ENGRAMS_BENCH=1 runs it (ENGRAMS_BENCH_ENABLES, default 3);
// it prints a table.
func TestBenchImages(t *testing.T) {
	requireBench(t)
	requireQEMU(t)
	enables := envInt("ENGRAMS_BENCH_ENABLES", 3)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	ref := reg.Ref("bench/debian", "12")
	reg.Push(t, "bench/debian", "12", imagetest.Debian(t))
	e := startImageEnv(t)
	e.startQEMUHost(t)
	ctx := context.Background()

	stageNames := []string{"resolve", "pull", "rootfs", "chunks", "place", "on_host", "fetch_rootfs", "boot", "warmup", "snapshot", "upload"}
	stages := map[string][]time.Duration{}
	var total []time.Duration
	for i := range enables {
		t0 := time.Now()
		_, job := e.enable(t, apiv1.EnableImageRequest{Ref: ref, Name: fmt.Sprint("deb", i), Warmup: "echo warmed > /warm",
			Env: map[string]string{"RUN": strconv.Itoa(i)}})
		total = append(total, time.Since(t0))
		if job.State != "ready" {
			t.Fatalf("enable %d: %+v", i, job)
		}
		for k, v := range job.StagesMS {
			stages[k] = append(stages[k], time.Duration(v)*time.Millisecond)
		}
	}
	var reenable []time.Duration
	for range 10 {
		t0 := time.Now()
		_, job := e.enable(t, apiv1.EnableImageRequest{Ref: ref, Name: "deb-again", Warmup: "echo warmed > /warm", Env: map[string]string{"RUN": "0"}})
		reenable = append(reenable, time.Since(t0))
		if job.State != "ready" {
			t.Fatalf("re-enable: %+v", job)
		}
		if _, err := e.c.Images().Disable(ctx, "deb-again"); err != nil {
			t.Fatal(err)
		}
	}
	tb := &benchTable{Started: time.Now()}
	tb.durations(groupCreate, "enable Debian, total (API until ready)", total, "", "")
	for _, k := range stageNames { // on_host is what the host call took beyond the stages after it, its parts
		if d := stages[k]; len(d) > 0 {
			tb.durations(groupCreate, "  stage "+k, d, "", "")
		}
	}
	tb.durations(groupCreate, "re-enable of a ready digest (API until ready)", reenable, "enable Debian, total (API until ready)", "")
	tb.resolve()
	fmt.Printf("\nimage benchmark: QEMU TCG, debootstrap'd Debian bookworm (glibc), local registry and blob dir\n%s", tb)
}

// createActive creates n sessions one after another, each timed from the
// request until Active, and deletes each.
func createActive(t *testing.T, e *imageEnv, n int, spec apiv1.SessionSpec) []time.Duration {
	t.Helper()
	ctx := context.Background()
	var out []time.Duration
	for range n {
		t0 := time.Now()
		s, err := e.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: spec}, true)
		d := time.Since(t0)
		if err != nil || s.State != "active" {
			t.Fatalf("create %+v: %+v %v", spec, s, err)
		}
		out = append(out, d)
		if err := e.c.Sessions().Delete(ctx, s.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	return slices.Clip(out)
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
