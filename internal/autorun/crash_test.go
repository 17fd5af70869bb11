package autorun

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// The crash test's child process: the test binary again, with these
// variables set, runs crashChild instead of the tests.
const (
	envChild     = "AUTORUN_CRASH_CHILD" // the effects log
	envChildLite = "AUTORUN_CRASH_SQLITE"
	envChildPG   = "AUTORUN_CRASH_POSTGRES"
)

func TestMain(m *testing.M) {
	if log := os.Getenv(envChild); log != "" {
		crashChild(log)
		return
	}
	os.Exit(m.Run())
}

const crashing = `
name: crashing
trigger: {kind: manual}
blocks:
  - {id: task, kind: start_task, profile: dev, prompt: first}
  - {id: follow, kind: send_prompt, task: task, prompt: second}
  - {id: idle, kind: wait_idle, task: task, timeout: 5m}
  - {id: stop, kind: end_session, task: task}
`

// crashChild starts a run whose third block waits forever, prints the
// run's id and waits to be killed.
func crashChild(log string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	t := &testing.T{}
	d := db{sqlitePath: os.Getenv(envChildLite), pgURL: os.Getenv(envChildPG)}
	st, err := d.openPlain()
	if err != nil {
		fail(err)
	}
	ft := newFakeTasks(t, log)
	ft.hold = true
	r := openRunner(t, d, st, "child", ft, func(c *Config, _ *Deps) { c.StaleAfter = time.Hour })
	go func() { _ = r.Run(context.Background()) }()
	if _, err := r.CreateAutomation(context.Background(), domain.FirstOrg, []byte(crashing), false); err != nil {
		fail(err)
	}
	s, err := r.StartRun(context.Background(), domain.FirstOrg, "crashing", RunRequest{})
	if err != nil {
		fail(err)
	}
	fmt.Println(s.Run.ID)
	select {}
}

// TestKilledRunResumesElsewhere: a replica killed (SIGKILL) while a run's
// third block runs; another replica takes the run over once the first is
// stale. Blocks 1 and 2 do not run again (one task started, one prompt
// sent), block 3 runs a second time, and the run completes.
func TestKilledRunResumesElsewhere(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			log := t.TempDir() + "/effects.log"
			st := d.open(t) // migrates before the child starts
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envChild+"="+log, envChildLite+"="+d.sqlitePath, envChildPG+"="+d.pgURL)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("read the child's run id: %v", err)
			}
			id := domain.AutomationRunID(strings.TrimSpace(line))
			waitSteps(t, st, id, func(steps []domain.RunStep) bool {
				return len(steps) == 3 && steps[2].State == domain.StepRunning
			})
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			ft := newFakeTasks(t, log)
			ft.idle = true // the task's turns ended while no replica watched
			e := newEnv(t, d, "survivor", ft)
			run := e.waitRun(t, id, domain.RunSucceeded, domain.RunFailed)
			if run.State != domain.RunSucceeded {
				t.Fatalf("run after the takeover: %+v", run)
			}
			steps, err := st.ListSteps(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			var attempts []int64
			for _, s := range steps {
				attempts = append(attempts, s.Attempt)
			}
			if !slices.Equal(attempts, []int64{1, 1, 2, 1}) || steps[2].Output != "done elsewhere" {
				t.Fatalf("step attempts %v (want block 3 run twice), steps %+v", attempts, steps)
			}
			if got := effects(t, log); !slices.Equal(got, []string{"start_dev_first", "send_second", "stop"}) {
				t.Fatalf("effects %v: each block's side effect must happen once", got)
			}
		})
	}
}

func waitSteps(t *testing.T, st interface {
	ListSteps(context.Context, domain.AutomationRunID) ([]domain.RunStep, error)
}, id domain.AutomationRunID, ok func([]domain.RunStep) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		steps, err := st.ListSteps(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(steps) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps of run %s: %+v", id, steps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
