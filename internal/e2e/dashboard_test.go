package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/githubtest"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/modeltest"
	"github.com/engrams/engrams/internal/pricing"
	"github.com/engrams/engrams/internal/testutil"
)

// webDir is the dashboard's source, with the browser tests' scripts.
var webDir = filepath.Join("..", "..", "web")

// requireBrowser skips (fails in CI) without Debian's chromium, node and
// web/node_modules (scripts/install-deps.sh installs them).
func requireBrowser(t *testing.T) string {
	t.Helper()
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		testutil.SkipOrFail(t, "no chromium at %s (scripts/install-deps.sh installs Debian's): %v", chromium, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		testutil.SkipOrFail(t, "node not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "playwright-core")); err != nil {
		testutil.SkipOrFail(t, "web/node_modules has no playwright-core (scripts/install-deps.sh runs npm ci): %v", err)
	}
	return chromium
}

// artifactsDir is where browser tests leave their screenshots:
// $ENGRAMS_ARTIFACTS, else web/test-results (kept after the test).
func artifactsDir(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("ENGRAMS_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(webDir, "test-results")
	}
	dir, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboardInBrowser (issue 15): web/e2e/dashboard.mjs drives Debian's
// chromium through the dashboard of `engrams dev` (QEMU host, Claude Code
// against the scripted model server): login link, composer, streamed
// answer, Changes, Files, Terminal, the badge following a suspend from the
// CLI, a follow-up that resumes, the receipt following the allowlist
// before saving, an image's enable stages; screenshots of every page at
// 1280×800 and 390×844, light and dark, each checked by axe-core, and at
// 390 px no page wider than the screen and every section reached through
// the menu.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	d := startDashboardEnv(t)
	artifacts := artifactsDir(t, "dashboard")
	cfg := d.config(t, artifacts)
	cfg["enableRef"], cfg["enableName"], cfg["token"] = d.reg.Ref("team/debian-extra", "1"), "debian-extra", d.dev.token(t)
	gh := githubtest.Start(t, "ghp_dash")
	runDevCLI(t, d, "integration", "add", "github", "--secret", "token=ghp_dash", "--api-url", gh.URL)
	cfg["prRepo"] = "acme/app"
	cfg["usageModel"], cfg["usageTokens"], cfg["usageCost"] = dashboardModel, "11,000 in (8,000 cache read, 1,000 cache write), 100 out", "$0.014"
	runBrowserScript(t, d.chromium, "dashboard.mjs", cfg, 25*time.Minute)
	checkFirstTurnUsage(t, d)
	t.Logf("screenshots: %s", artifacts)
	if prs := gh.PRs(); len(prs) != 1 || prs[0].Repo != "acme/app" || d.git.show(t, "app", prs[0].Head, cfg["changedFile"]) == "" {
		t.Fatalf("the Changes tab's pull request: %+v", prs)
	}
}

// dashboardEnv is `engrams dev` with a QEMU host, debian-git enabled,
// Claude Code built, a repository, the scripted model and the profile
// "agent" over them; debian-extra is in the registry, not enabled.
type dashboardEnv struct {
	dev      *devProc
	reg      *imagetest.Registry
	dir      string
	chromium string
	model    *modeltest.Server
	git      *gitServer
}

// dashboardUsage is what the scripted model reports for each answer in the
// dashboard's env, and dashboardModel the model its profile asks for: the
// first turn (two answers) uses 2×1000 uncached + 2×4000 cache-read +
// 2×500 cache-write = 11,000 input and 2×50 output tokens of
// claude-sonnet-4-5, at $3, $0.30, $3.75 and $15 per million tokens
// $0.01365, shown as $0.014.
var dashboardUsage = modeltest.Usage{Input: 1000, Output: 50, CacheRead: 4000, CacheWrite: 500}

const dashboardModel = "claude-sonnet-4-5"

func startDashboardEnv(t *testing.T) *dashboardEnv {
	t.Helper()
	requireQEMU(t)
	chromium := requireBrowser(t)
	d := startDevAgentEnvWith(t, dashboardModel, &dashboardUsage)
	d.chromium = chromium
	return d
}

// startDevAgentEnv is `engrams dev` on QEMU with an image with git, Claude
// Code, a git server with one repository, the scripted model and a
// profile "agent" of them.
func startDevAgentEnv(t *testing.T) *dashboardEnv {
	t.Helper()
	return startDevAgentEnvWith(t, "", nil)
}

// startDevAgentEnvWith is startDevAgentEnv whose profile asks for profileModel
// ("" for the harness's default) and whose scripted answers report usage
// (nil: reckoned from their sizes).
func startDevAgentEnvWith(t *testing.T, profileModel string, usage *modeltest.Usage) *dashboardEnv {
	t.Helper()
	requireQEMU(t)
	ctx := context.Background()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "team/debian-git", "12", imagetest.DebianWith(t, "git"))
	reg.Push(t, "team/debian-extra", "1", imagetest.DebianPlus(t, map[string]string{"/etc/engrams-dashboard-test": "enabled from the browser\n"}))
	git := startGitServer(t, "git", "git-secret-pass")
	repoURL := git.repo(t, "app", map[string]string{"README.md": "# app\n"})
	key := "sk-real-" + strings.Repeat("d45b", 8)
	script := claudeCase.script("/work/app")
	for i := range script {
		script[i].Usage = usage
	}
	model := modeltest.Start(t, modeltest.Config{APIKey: key, Script: script, XShouldRetry: "false", Logf: t.Logf})

	dir := shortTempDir(t)
	dev := startDev(t, filepath.Join(dir, "data"), "qemu", "--harness-cache-dir", filepath.Join(modeltest.CacheDir(), "harness-npm"))
	c := dev.c
	en, err := c.Images().Enable(ctx, apiv1.EnableImageRequest{Ref: reg.Ref("team/debian-git", "12"), Name: agentImage, MemoryMiB: 1024, DiskGiB: 2})
	if err != nil {
		t.Fatalf("enable %s: %v", agentImage, err)
	}
	if job, err := c.Images().WaitJob(ctx, en.Job.ID, 200*time.Millisecond, nil); err != nil || job.State != "ready" {
		t.Fatalf("enable %s: %+v %v (dev log %s)", agentImage, job, err, dev.stderr)
	}
	if _, err := c.Harnesses().Build(ctx, apiv1.BuildHarnessRequest{Name: claudeCase.harness, Version: claudeCase.version}); err != nil {
		t.Fatalf("build harness: %v", err)
	}
	for _, s := range []apiv1.CreateSecretRequest{
		{Name: "git", Kind: "git_https", Value: "git-secret-pass", Meta: apiv1.SecretMeta{Username: "git", Host: strings.TrimPrefix(git.URL, "http://")}},
		{Name: "model", Kind: claudeCase.secretKind, Value: key, Meta: apiv1.SecretMeta{BaseURL: claudeCase.baseURL(model)}},
	} {
		if _, err := c.Secrets().Create(ctx, s); err != nil {
			t.Fatalf("create secret %s: %v", s.Name, err)
		}
	}
	spec := apiv1.ProfileSpec{Image: agentImage, Harness: claudeCase.harness, Model: profileModel, Repos: []apiv1.ProfileRepo{{URL: repoURL, Credential: "git"}}, Credentials: []string{"model"}}
	if _, err := c.Profiles().Create(ctx, apiv1.CreateProfileRequest{Name: "agent", Spec: spec}); err != nil {
		t.Fatalf("create profile: %v", err)
	}
	return &dashboardEnv{dev: dev, reg: reg, dir: dir, model: model, git: git}
}

// config is what web/e2e's scripts are told of the env.
func (d *dashboardEnv) config(t *testing.T, artifacts string) map[string]string {
	t.Helper()
	return map[string]string{
		"baseURL": d.dev.url, "loginURL": d.dev.loginLink(t), "cli": filepath.Join(binDir, "engrams"),
		"cliConfig": filepath.Join(d.dir, "cli.json"), "artifacts": artifacts,
		"profile": "agent", "image": agentImage, "prompt": "create hello.txt with hi", "firstAnswer": "Created hello.txt",
		"changedFile": "hello.txt", "followUp": "what did you create?", "followUpAnswer": "Earlier I created hello.txt",
	}
}

// runBrowserScript runs web/e2e/script with cfg (as a JSON file), its
// output in the test's log; a non-zero exit fails the test.
func runBrowserScript(t *testing.T, chromium, script string, cfg map[string]string, limit time.Duration) {
	t.Helper()
	browserScriptOutput(t, chromium, script, cfg, limit)
}

// browserScriptOutput is runBrowserScript returning the script's last
// line of output.
func browserScriptOutput(t *testing.T, chromium, script string, cfg map[string]string, limit time.Duration) string {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("e2e", script), cfgFile)
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node %s: %v", script, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last string
	for sc.Scan() {
		last = sc.Text()
		t.Log(last)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v (screenshots in %s)", script, err, cfg["artifacts"])
	}
	return last
}

// TestBenchDashboard (issue 15's figures; ENGRAMS_BENCH=1): page load to
// the first task-list paint and Send to the answer's first text on screen,
// 10 runs each (ENGRAMS_BENCH_RUNS), median and p95, and the production
// bundle's size gzipped.
func TestBenchDashboard(t *testing.T) {
	requireBench(t)
	d := startDashboardEnv(t)
	ctx := context.Background()
	task, err := d.dev.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "agent", Prompt: "create hello.txt with hi"})
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	waitTurn(t, d.dev.c, task.ID, 0, 10*time.Minute)
	runs := os.Getenv("ENGRAMS_BENCH_RUNS")
	if runs == "" {
		runs = "10"
	}
	cfg := d.config(t, t.TempDir())
	cfg["token"], cfg["taskId"], cfg["runs"] = d.dev.token(t), task.ID, runs
	out := browserScriptOutput(t, d.chromium, "bench.mjs", cfg, 30*time.Minute)
	var res struct{ Load, Send []float64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench output %q: %v", out, err)
	}
	// The server's own record of each follow-up: its prompt event to the
	// answer's first text event, a cross-check of the in-page figure.
	var server []float64
	var prompted time.Time
	err = d.dev.c.Tasks().Events(ctx, task.ID, 0, false, func(e apiv1.TaskEvent) error {
		switch {
		case e.Type == "prompt":
			prompted = e.Time
		case e.Type == "assistant_text" && !prompted.IsZero():
			server = append(server, float64(e.Time.Sub(prompted))/float64(time.Millisecond))
			prompted = time.Time{}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the task's events: %v", err)
	}
	t.Logf("server side, prompt event -> first answer event, ms: %v", server)
	first, all := bundleSizes(t)
	t.Logf("\n%-36s %8s %8s %5s\n%-36s %8.0f %8.0f %5d\n%-36s %8.0f %8.0f %5d\nbundle (gzip): first load %.1f KiB, all assets %.1f KiB",
		"dashboard", "p50 ms", "p95 ms", "runs",
		"page load -> first task-list paint", pct(res.Load, 50), pct(res.Load, 95), len(res.Load),
		"click Send -> first answer on screen", pct(res.Send, 50), pct(res.Send, 95), len(res.Send),
		float64(first)/1024, float64(all)/1024)
}

// bundleSizes gzips the built dashboard: what the first page load fetches
// (index.html and the assets it names) and every file.
func bundleSizes(t *testing.T) (first, all int) {
	t.Helper()
	root := filepath.Join("..", "dashboard", "static.gen")
	index, err := os.ReadFile(filepath.Join(root, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		_, _ = w.Write(b)
		_ = w.Close()
		rel, _ := filepath.Rel(root, p)
		all += z.Len()
		if rel == "index.html" || bytes.Contains(index, []byte("/"+filepath.ToSlash(rel))) {
			first += z.Len()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return first, all
}

// checkFirstTurnUsage: the first task's first usage event is the first
// turn's, exactly as dashboardUsage and the built-in price table make it.
func checkFirstTurnUsage(t *testing.T, d *dashboardEnv) {
	t.Helper()
	ctx := context.Background()
	ts, err := d.dev.c.Tasks().List(ctx, "", "")
	if err != nil || len(ts) == 0 {
		t.Fatalf("list tasks: %d, %v", len(ts), err)
	}
	u2 := dashboardUsage
	tok := domain.Tokens{Input: int64(2 * (u2.Input + u2.CacheRead + u2.CacheWrite)), Output: int64(2 * u2.Output),
		CacheRead: int64(2 * u2.CacheRead), CacheWrite: int64(2 * u2.CacheWrite)}
	want, _ := pricing.Builtin().Price(dashboardModel, tok)
	var got *apiv1.TurnUsage
	err = d.dev.c.Tasks().Events(ctx, ts[0].ID, 0, false, func(e apiv1.TaskEvent) error {
		if got == nil && e.Usage != nil {
			got = e.Usage
		}
		return nil
	})
	if err != nil || got == nil || got.Model != dashboardModel || got.InputTokens != tok.Input || got.OutputTokens != tok.Output ||
		got.CacheReadTokens != tok.CacheRead || got.CacheWriteTokens != tok.CacheWrite || got.Cost == nil ||
		got.Cost.Micros != want.Micros || want.Micros != 13_650 || got.PriceTable != pricing.BuiltinID {
		t.Fatalf("first turn's usage %+v (cost %+v), %v; want %+v at %d micros", got, got.Cost, err, tok, want.Micros)
	}
}
