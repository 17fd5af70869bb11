package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/githubtest"
	"github.com/engrams/engrams/internal/hookapp"
	"github.com/engrams/engrams/internal/modeltest"
)

// helloAutomation starts a task from a webhook's prompt, waits for the
// agent, runs a command in its VM and ends its session.
const helloAutomation = `
name: hello
trigger: {kind: webhook, slug: hello}
blocks:
  - {id: task, kind: start_task, profile: agent, prompt: "{{trigger.prompt}}"}
  - {id: idle, kind: wait_idle, task: task, timeout: 5m}
  - {id: check, kind: run_command, task: task, env: {FILE: "{{trigger.check}}"}, command: 'cat "$FILE"'}
  - {id: stop, kind: end_session, task: task}
`

// createAutomation saves def with the CLI (in this process) and returns
// what it printed with --json.
func createAutomation(t *testing.T, d *dashboardEnv, def string) apiv1.AutomationResponse {
	t.Helper()
	file := filepath.Join(d.dir, "automation.yaml")
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb syncBuffer
	if code := runCLI(context.Background(), d.dev.url, d.dev.token(t), &out, &errb, "automation", "create", file, "--enable", "--json"); code != 0 {
		t.Fatalf("engrams automation create: exit %d: %s", code, errb.String())
	}
	var r apiv1.AutomationResponse
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil || r.HookSecret == "" {
		t.Fatalf("automation create printed %q: %v", out.String(), err)
	}
	return r
}

// deliver posts a webhook delivery signed with secret at ts.
func deliver(t *testing.T, url, secret, id string, ts time.Time, body []byte) (int, apiv1.RunResponse) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(apiv1.HeaderHookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(apiv1.HeaderHookSignature, hookapp.Sign([]byte(secret), ts.Unix(), body))
	req.Header.Set(apiv1.HeaderHookDelivery, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r apiv1.RunResponse
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// waitRun polls a run until it ends.
func waitRun(t *testing.T, d *dashboardEnv, id string, limit time.Duration) apiv1.RunDetail {
	t.Helper()
	var run apiv1.RunDetail
	eventually(t, limit, "run "+id+" ends", func() (bool, string) {
		var err error
		run, err = d.dev.c.Automations().GetRun(context.Background(), id)
		return err == nil && (run.State == apiv1.RunSucceeded || run.State == apiv1.RunFailed || run.State == apiv1.RunCancelled),
			fmt.Sprintf("%s %s %v", run.State, run.Error, err)
	})
	return run
}

func stepOf(run apiv1.RunDetail, block string) apiv1.RunStep {
	for _, s := range run.Steps {
		if s.Block == block {
			return s
		}
	}
	return apiv1.RunStep{}
}

func modelTurns(d *dashboardEnv, name string) int {
	n := 0
	for _, r := range d.model.ModelRequests() {
		if r.Turn == name {
			n++
		}
	}
	return n
}

// TestAutomationWebhookStartsAgent: a signed webhook to `engrams dev`
// starts a real agent (Claude Code on a QEMU guest, the scripted model);
// the run waits for its turn, runs a command in its VM and ends its
// session, each a recorded step. The same delivery again, a forged one
// and a stale one start nothing.
func TestAutomationWebhookStartsAgent(t *testing.T) {
	t.Parallel()
	d := startDevAgentEnv(t)
	saved := createAutomation(t, d, helloAutomation)
	hook := d.dev.url + saved.HookURL
	body := []byte(`{"prompt":"create hello.txt with hi","check":"/work/app/hello.txt"}`)
	sent := time.Now()
	status, first := deliver(t, hook, saved.HookSecret, "delivery-1", sent, body)
	if status != http.StatusAccepted || first.Duplicate {
		t.Fatalf("first delivery: %d %+v", status, first)
	}
	run := waitRun(t, d, first.ID, 5*time.Minute)
	if run.State != apiv1.RunSucceeded {
		t.Fatalf("run: %+v", run)
	}
	taskID := stepOf(run, "task").Output
	started := runStartedAt(t, d, taskID)
	t.Logf("webhook to agent started: %s", started.Sub(sent).Round(time.Millisecond))
	if out := stepOf(run, "idle").Output; !strings.Contains(out, "Created hello.txt") {
		t.Errorf("wait_idle output %q", out)
	}
	if out := stepOf(run, "check").Output; out != "hi\n" {
		t.Errorf("run_command output %q, want the file the agent wrote", out)
	}
	for _, s := range run.Steps {
		if s.Attempt != 1 || s.State != "succeeded" {
			t.Errorf("step %+v", s)
		}
	}
	// The same signed request again, under other delivery ids: one run.
	for i := range 4 {
		status, again := deliver(t, hook, saved.HookSecret, fmt.Sprint("delivery-", i+2), sent, body)
		if status != http.StatusOK || !again.Duplicate || again.ID != first.ID {
			t.Fatalf("the same delivery again (%d): %d %+v", i, status, again)
		}
	}
	forged, _ := json.Marshal(map[string]string{"prompt": "rm -rf /", "check": "id"})
	req := []struct {
		what string
		ts   time.Time
		body []byte
		sign []byte
	}{{"forged", time.Now(), forged, body}, {"stale", time.Now().Add(-6 * time.Minute), body, body}}
	for _, r := range req {
		hr, _ := http.NewRequest(http.MethodPost, hook, strings.NewReader(string(r.body)))
		hr.Header.Set(apiv1.HeaderHookTimestamp, strconv.FormatInt(r.ts.Unix(), 10))
		hr.Header.Set(apiv1.HeaderHookSignature, hookapp.Sign([]byte(saved.HookSecret), r.ts.Unix(), r.sign))
		hr.Header.Set(apiv1.HeaderHookDelivery, "delivery-"+r.what)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s delivery: %d, want 401", r.what, resp.StatusCode)
		}
	}
	tasks, err := d.dev.c.Tasks().List(context.Background(), "", "")
	if err != nil || len(tasks) != 1 || modelTurns(d, "write") != 1 {
		t.Fatalf("%d tasks (%v), %d first turns: one delivery is one agent", len(tasks), err, modelTurns(d, "write"))
	}

	checkTaskPR(t, d, taskID)
}

// checkTaskPR: engrams task pr pushes the task's change as a branch (the
// coordinator, with the repository's credential) and opens a pull request
// of it on the fake GitHub linking back to the task; again: the same one.
func checkTaskPR(t *testing.T, d *dashboardEnv, taskID string) {
	t.Helper()
	// The run's last block stopped the task: its session suspends first.
	eventually(t, 2*time.Minute, "the stopped task's session to suspend", func() (bool, string) {
		task, err := d.dev.c.Tasks().Get(context.Background(), taskID)
		if err != nil {
			return false, err.Error()
		}
		s, err := d.dev.c.Sessions().Get(context.Background(), task.SessionID)
		return err == nil && s.State == "idle", fmt.Sprint(s.State, err)
	})
	gh := githubtest.Start(t, "ghp_pr")
	runDevCLI(t, d, "integration", "add", "github", "--secret", "token=ghp_pr", "--api-url", gh.URL, "--dashboard-url", d.dev.url)
	for range 2 {
		out := runDevCLI(t, d, "task", "pr", taskID, "--repo", "acme/app", "--title", "Add hello.txt")
		if !strings.Contains(out, "pull request #1") {
			t.Fatalf("task pr printed %q", out)
		}
	}
	prs := gh.PRs()
	branch := "engrams/task-" + strings.SplitN(taskID, "-", 2)[0]
	if len(prs) != 1 || prs[0].Head != branch || prs[0].Base != "main" || !strings.Contains(prs[0].Body, "/tasks/"+taskID) {
		t.Fatalf("pull requests: %+v", prs)
	}
	if msg := d.git.lastCommit(t, "app", branch); msg != "Add hello.txt" {
		t.Fatalf("the branch %s is at %q, want the task's commit", branch, msg)
	}
	if diff := d.git.show(t, "app", branch, "hello.txt"); diff != "hi\n" {
		t.Fatalf("hello.txt on the branch: %q", diff)
	}
}

// runStartedAt is when a task's harness said its run started.
func runStartedAt(t *testing.T, d *dashboardEnv, taskID string) time.Time {
	t.Helper()
	evs, _ := waitTurn(t, d.dev.c, taskID, 0, time.Minute)
	for _, e := range evs {
		if e.Type == "run_started" {
			return e.Time
		}
	}
	t.Fatalf("task %s has no run_started event", taskID)
	return time.Time{}
}

// killedAutomation comments on a pull request, starts a task, runs a
// long command in its VM (where the test kills dev), waits for the agent,
// comments again and ends the session. The command waits for the agent's
// file before its 40 seconds, so the window in which the test kills dev
// (the task idle, the command still running) does not depend on how long
// the agent's first turn takes on a loaded machine.
const killedAutomation = `
name: killed
trigger: {kind: webhook, slug: killed}
blocks:
  - {id: hello, kind: github_comment, repo: acme/app, number: "7", text: "Run {{trigger.n}} started."}
  - {id: task, kind: start_task, profile: agent, prompt: "create hello.txt with hi"}
  - {id: slow, kind: run_command, task: task, command: "while [ ! -f /work/app/hello.txt ]; do sleep 1; done; sleep 40; echo slept"}
  - {id: idle, kind: wait_idle, task: task, timeout: 5m}
  - {id: bye, kind: github_comment, repo: acme/app, number: "7", text: "Done: {{steps.idle.output}}"}
  - {id: stop, kind: end_session, task: task}
`

// TestAutomationRunSurvivesKill9: `engrams dev` killed with SIGKILL while
// a run's third block runs; restarted on the same data, it resumes the run
// from that block. Blocks 1 and 2 do not run again (one comment on the
// fake GitHub, one task, one first turn at the model), the third runs a
// second time, the rest once, and the step record says so.
func TestAutomationRunSurvivesKill9(t *testing.T) {
	t.Parallel()
	d := startDevAgentEnv(t)
	gh := githubtest.Start(t, "ghp_kill")
	runDevCLI(t, d, "integration", "add", "github", "--secret", "token=ghp_kill", "--secret", "webhook_secret=x", "--api-url", gh.URL)
	saved := createAutomation(t, d, killedAutomation)
	status, first := deliver(t, d.dev.url+saved.HookURL, saved.HookSecret, "kill-1", time.Now(), []byte(`{"n":"1"}`))
	if status != http.StatusAccepted {
		t.Fatalf("delivery: %d", status)
	}
	// Kill while the third block's command runs in the guest, once the
	// task's session is set up (its first turn ended).
	eventually(t, 5*time.Minute, "the run's third block runs on a task set up", func() (bool, string) {
		run, err := d.dev.c.Automations().GetRun(context.Background(), first.ID)
		if err != nil || len(run.Steps) != 3 || run.Steps[2].State != "running" {
			return false, fmt.Sprintf("%+v %v", run.Steps, err)
		}
		task, err := d.dev.c.Tasks().Get(context.Background(), run.Steps[1].Output)
		return err == nil && task.State == "idle", fmt.Sprintf("task %+v %v", task, err)
	})
	if _, err := d.dev.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("engrams dev exited cleanly from SIGKILL")
	}
	d.dev = startDev(t, d.dev.data, "qemu", "--harness-cache-dir", filepath.Join(modeltest.CacheDir(), "harness-npm"))
	run := waitRun(t, d, first.ID, 5*time.Minute)
	if run.State != apiv1.RunSucceeded {
		t.Fatalf("run after the restart: %+v (dev log %s)", run, d.dev.log())
	}
	var attempts []int64
	for _, s := range run.Steps {
		attempts = append(attempts, s.Attempt)
	}
	if !slices.Equal(attempts, []int64{1, 1, 2, 1, 1, 1}) || stepOf(run, "slow").Output != "slept\n" {
		t.Fatalf("steps after the restart: %+v (want the third block run twice, the others once)", run.Steps)
	}
	tasks, err := d.dev.c.Tasks().List(context.Background(), "", "")
	if err != nil || len(tasks) != 1 || modelTurns(d, "write") != 1 {
		t.Fatalf("%d tasks (%v), %d first turns at the model: blocks 1 and 2 ran again", len(tasks), err, modelTurns(d, "write"))
	}
	comments := gh.Comments("acme/app", 7)
	if len(comments) != 2 || !strings.HasPrefix(comments[0].Body, "Run 1 started.") || !strings.HasPrefix(comments[1].Body, "Done: Created hello.txt") {
		t.Fatalf("comments on the fake GitHub: %+v (want each once)", comments)
	}
}

// startOnly starts a task from a webhook and ends there.
const startOnly = `
name: start-only
trigger: {kind: webhook, slug: start-only}
blocks:
  - {id: task, kind: start_task, profile: agent, prompt: "{{trigger.prompt}}"}
`

// TestBenchWebhookToAgent measures a signed webhook delivery to the
// agent's run_started event (the harness running in its VM), against
// starting the same task straight through the API in the same run.
// Gated by ENGRAMS_BENCH=1.
func TestBenchWebhookToAgent(t *testing.T) {
	requireBench(t)
	d := startDevAgentEnv(t)
	saved := createAutomation(t, d, startOnly)
	const n = 10
	var hook, direct []time.Duration
	ctx := context.Background()
	for i := range n {
		sent := time.Now()
		status, r := deliver(t, d.dev.url+saved.HookURL, saved.HookSecret, fmt.Sprint("bench-", i), sent,
			[]byte(fmt.Sprintf(`{"prompt":"what did you create?","n":%d}`, i)))
		if status != http.StatusAccepted {
			t.Fatalf("delivery %d: %d", i, status)
		}
		run := waitRun(t, d, r.ID, 2*time.Minute)
		taskID := stepOf(run, "task").Output
		hook = append(hook, runStartedAt(t, d, taskID).Sub(sent))
		_, _ = d.dev.c.Tasks().Stop(ctx, taskID)

		sent = time.Now()
		task, err := d.dev.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "agent", Prompt: "what did you create?"})
		if err != nil {
			t.Fatal(err)
		}
		direct = append(direct, runStartedAt(t, d, task.ID).Sub(sent))
		_, _ = d.dev.c.Tasks().Stop(ctx, task.ID)
	}
	fmt.Printf("%-28s %10s %10s\n", fmt.Sprintf("to run_started (n=%d)", n), "p50", "p95")
	fmt.Printf("%-28s %10s %10s\n", "webhook → automation", pct(hook, 50).Round(time.Millisecond), pct(hook, 95).Round(time.Millisecond))
	fmt.Printf("%-28s %10s %10s\n", "POST /v1/tasks (baseline)", pct(direct, 50).Round(time.Millisecond), pct(direct, 95).Round(time.Millisecond))
	fmt.Printf("%-28s %9.2fx\n", "ratio of p50", float64(pct(hook, 50))/float64(pct(direct, 50)))
}
