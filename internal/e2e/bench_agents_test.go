package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/modeltest"
)

// TestBenchAgentFirstEvent measures prompt -> first assistant event through
// engrams (the real CLI in a QEMU guest, reached through the outbox, its
// model calls through the gateway, its events relayed back and read from
// the task's event stream) against the same CLI run directly on this host
// against the same scripted server, alternating the two so both see the
// same machine load. Gated by ENGRAMS_BENCH=1 (ENGRAMS_BENCH_PROMPTS sets
// the prompts per side, default 9).
func TestBenchAgentFirstEvent(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") != "1" {
		t.Skip("set ENGRAMS_BENCH=1 to measure")
	}
	n := 9
	if v := os.Getenv("ENGRAMS_BENCH_PROMPTS"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	claudeBin, codexBin := modeltest.RequireCLIs(t)
	var rows []string
	shellDir := t.TempDir()
	hb, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: t.TempDir()}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hb.StageBuiltin(context.Background(), harness.BuiltinSpec{Name: harness.BuiltinShell}, shellDir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []firstEventCase{
		{shellCase, "run_started", func(t *testing.T, _ *modeltest.Server, _, prompt string) time.Duration {
			cmd := exec.Command("/bin/sh", filepath.Join(shellDir, harness.ShellEntrypoint))
			cmd.Stdin = strings.NewReader("echo " + strings.ReplaceAll(prompt, " ", "-") + "\n")
			return directFirst(t, cmd, []string{"PATH=/usr/bin:/bin"}, func(l modeltest.Line) bool { return l.Type == "prompt" })
		}},
		{claudeCase, "assistant_text", func(t *testing.T, srv *modeltest.Server, key, prompt string) time.Duration {
			return directFirst(t, exec.Command(claudeBin, "-p", prompt, "--output-format", "stream-json", "--verbose"),
				modeltest.ClaudeEnv(t.TempDir(), srv.URL(), key), func(l modeltest.Line) bool { return l.Type == "assistant" })
		}},
		{codexCase, "assistant_text", func(t *testing.T, srv *modeltest.Server, key, prompt string) time.Duration {
			env, err := modeltest.CodexEnv(t.TempDir(), t.TempDir(), srv.URL()+"/v1", key)
			if err != nil {
				t.Fatal(err)
			}
			return directFirst(t, exec.Command(codexBin, "exec", "--json", "--skip-git-repo-check", prompt), env,
				func(l modeltest.Line) bool {
					var item struct {
						Type string `json:"type"`
					}
					return l.Type == "item.completed" && l.Field("item", &item) && item.Type == "agent_message"
				})
		}},
	} {
		t.Run(tc.ac.harness, func(t *testing.T) {
			rows = append(rows, benchFirstEvent(t, tc, n))
		})
	}
	t.Logf("prompt -> first assistant event (the CLI in a QEMU guest under this machine's accelerator, through engrams, vs the same CLI run directly on the host; the shell row is the plumbing alone: prompt -> the adapter's run_started event back at the client, vs the shell harness's first line run on the host):\n"+
		"| harness | prompts | engrams median | engrams p95 | direct median | direct p95 | ratio (medians) | new task: start -> first event |\n"+
		"|---|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}

// firstEventCase is a harness to measure, the event that answers a prompt
// to it, and how to time that event with its CLI run directly.
type firstEventCase struct {
	ac     agentCase
	first  string // the event that answers a prompt
	direct func(t *testing.T, srv *modeltest.Server, key, prompt string) time.Duration
}

// benchFirstEvent starts a task of tc's harness, then sends n prompts,
// each alternated with a direct run, and returns the table row: prompt ->
// first event through engrams and directly, and a new task's start ->
// first event.
func benchFirstEvent(t *testing.T, tc firstEventCase, n int) string {
	t.Helper()
	a := startAgentEnv(t, tc.ac)
	a.model.SetScript(append(tc.ac.script("/work/app"), modeltest.Turn{Name: "bench", When: modeltest.UserTextContains("bench prompt"), Text: "Hello from the scripted model."}))
	cred := ""
	if tc.ac.secretKind != "" {
		a.secret(t, "model", tc.ac.secretKind, a.key, apiv1.SecretMeta{BaseURL: tc.ac.baseURL(a.model)})
		cred = "model"
	}
	a.profile(t, "bench", tc.ac, cred)
	ctx := context.Background()
	start := time.Now()
	task, err := a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "bench", Prompt: tc.ac.prompt(0)})
	if err != nil {
		t.Fatal(err)
	}
	_, first := waitTurnFor(t, a.c, task.ID, 0, tc.first)
	newTask := first.Sub(start)
	var viaEngrams, direct []time.Duration
	for i := 1; i <= n; i++ {
		prompt := tc.ac.prompt(i)
		direct = append(direct, tc.direct(t, a.model, a.key, prompt))
		sent := time.Now()
		e, err := a.c.Tasks().Send(ctx, task.ID, prompt)
		if err != nil {
			t.Fatal(err)
		}
		_, got := waitTurnFor(t, a.c, task.ID, e.Seq, tc.first)
		viaEngrams = append(viaEngrams, got.Sub(sent))
	}
	me, md := percentile(viaEngrams, 50), percentile(direct, 50)
	return fmt.Sprintf("| %s | %d | %v | %v | %v | %v | %.2f | %v |", tc.ac.harness, n,
		me.Round(time.Millisecond), percentile(viaEngrams, 95).Round(time.Millisecond),
		md.Round(time.Millisecond), percentile(direct, 95).Round(time.Millisecond),
		float64(me)/float64(md), newTask.Round(time.Millisecond))
}

// directFirst runs cmd on the host, in a git repository, and returns when its first assistant
// event came, counted from the process start.
func directFirst(t *testing.T, cmd *exec.Cmd, env []string, first func(modeltest.Line) bool) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env, c.Dir, c.Stdin = env, gitWorkdir(t), cmd.Stdin
	run, err := modeltest.RunJSONL(ctx, c, nil)
	if err != nil || run.ExitCode != 0 {
		t.Fatalf("%s: exit %d, %v\n%s", cmd.Path, run.ExitCode, err, run.Output())
	}
	l, ok := run.First(first)
	if !ok {
		t.Fatalf("%s: no assistant event in %v", cmd.Path, run.Types())
	}
	return l.At
}

// gitWorkdir is a git repository with one commit, like the clone a task
// works in (codex inspects the repository at every start).
func gitWorkdir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "initial"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// waitTurnFor follows a task's events after after until an idle event,
// quietly, and returns them and when the first event of type first came.
func waitTurnFor(t *testing.T, c *client.Client, id string, after int64, first string) ([]apiv1.TaskEvent, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var evs []apiv1.TaskEvent
	var at time.Time
	err := c.Tasks().Events(ctx, id, after, true, func(e apiv1.TaskEvent) error {
		evs = append(evs, e)
		if e.Type == first && at.IsZero() {
			at = time.Now()
		}
		if e.Type == "idle" {
			return client.ErrStopFollowing
		}
		return nil
	})
	if err != nil || at.IsZero() {
		t.Fatalf("follow task %s: %v (events %d, no %s)", id, err, len(evs), first)
	}
	return evs, at
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
