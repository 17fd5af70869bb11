package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/modeltest"
)

// benchAgents measures, for the shell harness (the plumbing alone), Claude
// Code and Codex: a new task's start -> its first agent event, and each
// later prompt -> first event and -> turn done, through engrams (the real
// CLI in a QEMU guest, reached through the outbox, its model calls through
// the gateway, its events read from the task's event stream) against the
// same CLI run directly on this host against the same scripted server,
// alternating the two so both see the same machine load. One env serves
// the three harnesses (a, started for Claude Code); n tasks and n prompts
// each.
func benchAgents(t *testing.T, a *agentEnv, tb *benchTable, n int) {
	claudeBin, codexBin := modeltest.RequireCLIs(t)
	shellDir := t.TempDir()
	hb, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: t.TempDir()}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hb.StageBuiltin(context.Background(), harness.BuiltinSpec{Name: harness.BuiltinShell}, shellDir); err != nil {
		t.Fatal(err)
	}
	cases := []firstEventCase{
		{shellCase, "run_started", func(t *testing.T, _ *modeltest.Server, _, prompt string) directRun {
			cmd := exec.Command("/bin/sh", filepath.Join(shellDir, harness.ShellEntrypoint))
			cmd.Stdin = strings.NewReader("echo " + strings.ReplaceAll(prompt, " ", "-") + "\n")
			return directFirst(t, cmd, []string{"PATH=/usr/bin:/bin"}, func(l modeltest.Line) bool { return l.Type == "prompt" })
		}},
		{claudeCase, "assistant_text", func(t *testing.T, srv *modeltest.Server, key, prompt string) directRun {
			return directFirst(t, exec.Command(claudeBin, "-p", prompt, "--output-format", "stream-json", "--verbose"),
				modeltest.ClaudeEnv(t.TempDir(), srv.URL(), key), func(l modeltest.Line) bool { return l.Type == "assistant" })
		}},
		{codexCase, "assistant_text", func(t *testing.T, srv *modeltest.Server, key, prompt string) directRun {
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
	}
	stopQEMU := watchVMMs(a.hostDir)
	defer stopQEMU()
	for _, tc := range cases {
		if tc.ac.harness != claudeCase.harness {
			if _, err := a.c.Harnesses().Build(context.Background(), apiv1.BuildHarnessRequest{Name: tc.ac.harness, Version: tc.ac.version}); err != nil {
				t.Fatalf("build harness %s: %v", tc.ac.harness, err)
			}
		}
		benchFirstEvent(t, a, tb, tc, n)
	}
	peaks := stopQEMU()
	tb.sizes(groupRSS, "QEMU, agent session (1 GiB image)", peaks, qemuBootedName, fmt.Sprintf("VmHWM of each of its %d QEMU processes", len(peaks)))
}

// firstEventCase is a harness to measure, the event that answers a prompt
// to it, and how to time that event with its CLI run directly.
type firstEventCase struct {
	ac     agentCase
	first  string // the event that answers a prompt
	direct func(t *testing.T, srv *modeltest.Server, key, prompt string) directRun
}

// directRun is when a CLI run directly gave its first assistant event and
// when it exited, counted from its start.
type directRun struct{ first, done time.Duration }

// benchFirstEvent starts n tasks of tc's harness one after another, each
// timed from the start to its first event and ended but the last, then
// sends the last one n prompts, each alternated with a direct run, and adds
// the rows.
func benchFirstEvent(t *testing.T, a *agentEnv, tb *benchTable, tc firstEventCase, n int) {
	t.Helper()
	a.model.SetScript(append(tc.ac.script("/work/app"), modeltest.Turn{Name: "bench", When: modeltest.UserTextContains("bench prompt"), Text: "Hello from the scripted model."}))
	cred, profile := "", "bench-"+tc.ac.harness
	if tc.ac.secretKind != "" {
		cred = "model-" + tc.ac.harness
		a.secret(t, cred, tc.ac.secretKind, a.key, apiv1.SecretMeta{BaseURL: tc.ac.baseURL(a.model)})
	}
	a.profile(t, profile, tc.ac, cred)
	ctx := context.Background()
	var newTask, newDirect, viaEngrams, direct, doneEngrams, doneDirect []time.Duration
	var task apiv1.Task
	for i := range n {
		newDirect = append(newDirect, tc.direct(t, a.model, a.key, tc.ac.prompt(0)).first)
		start := time.Now()
		var err error
		if task, err = a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: profile, Prompt: tc.ac.prompt(0)}); err != nil {
			t.Fatal(err)
		}
		first, _ := waitTurnFor(t, a.c, task.ID, 0, tc.first)
		newTask = append(newTask, first.Sub(start))
		if i < n-1 {
			endTask(t, a.c, task.ID)
		}
	}
	for i := 1; i <= n; i++ {
		prompt := tc.ac.prompt(i)
		d := tc.direct(t, a.model, a.key, prompt)
		direct, doneDirect = append(direct, d.first), append(doneDirect, d.done)
		sent := time.Now()
		e, err := a.c.Tasks().Send(ctx, task.ID, prompt)
		if err != nil {
			t.Fatal(err)
		}
		first, idle := waitTurnFor(t, a.c, task.ID, e.Seq, tc.first)
		viaEngrams, doneEngrams = append(viaEngrams, first.Sub(sent)), append(doneEngrams, idle.Sub(sent))
	}
	h := tc.ac.harness
	tb.durations(groupAgent, "new task -> first event: "+h, newTask, "CLI direct, start -> first event: "+h, "")
	tb.durations(groupAgent, "CLI direct, start -> first event: "+h, newDirect, "", "the CLI alone on this host")
	tb.durations(groupAgent, "prompt -> first event: "+h, viaEngrams, "CLI direct, prompt -> first event: "+h, "")
	tb.durations(groupAgent, "CLI direct, prompt -> first event: "+h, direct, "", "")
	tb.durations(groupAgent, "prompt -> turn done (idle): "+h, doneEngrams, "CLI direct, prompt -> exit: "+h, "")
	tb.durations(groupAgent, "CLI direct, prompt -> exit: "+h, doneDirect, "", "")
	guestDaemonRow(tb, "guest daemon VmHWM, agent session: "+h, []int64{guestDaemonHWM(t, a.c, task.SessionID)}, guestDaemonName, "after the turns")
	endTask(t, a.c, task.ID)
}

// endTask stops a task and deletes its session, so that the next one has
// the host to itself.
func endTask(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx := context.Background()
	task, err := c.Tasks().Stop(ctx, id)
	if err != nil {
		t.Fatalf("stop task %s: %v", id, err)
	}
	if task.SessionID != "" {
		_ = c.Sessions().Delete(ctx, task.SessionID, true)
	}
}

// directFirst runs cmd on the host, in a git repository, and returns when
// its first assistant event came and when it exited, counted from the
// process start.
func directFirst(t *testing.T, cmd *exec.Cmd, env []string, first func(modeltest.Line) bool) directRun {
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
	return directRun{first: l.At, done: run.Duration}
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
// quietly, and returns when the first event of type first came and when
// the idle one did.
func waitTurnFor(t *testing.T, c *client.Client, id string, after int64, first string) (at, idle time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := 0
	err := c.Tasks().Events(ctx, id, after, true, func(e apiv1.TaskEvent) error {
		n++
		if e.Type == first && at.IsZero() {
			at = time.Now()
		}
		if e.Type == "idle" {
			idle = time.Now()
			return client.ErrStopFollowing
		}
		return nil
	})
	if err != nil || at.IsZero() {
		t.Fatalf("follow task %s: %v (events %d, no %s)", id, err, n, first)
	}
	return at, idle
}
