package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/modeltest"
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
// 1280×800 and 390×844, each checked by axe-core.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	requireQEMU(t)
	chromium := requireBrowser(t)
	ctx := context.Background()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "team/debian-git", "12", imagetest.DebianWith(t, "git"))
	reg.Push(t, "team/debian-extra", "1", imagetest.DebianPlus(t, map[string]string{"/etc/engrams-dashboard-test": "enabled from the browser\n"}))
	git := startGitServer(t, "git", "git-secret-pass")
	repoURL := git.repo(t, "app", map[string]string{"README.md": "# app\n"})
	key := "sk-real-" + strings.Repeat("d45b", 8)
	model := modeltest.Start(t, modeltest.Config{APIKey: key, Script: claudeCase.script("/work/app"), XShouldRetry: "false", Logf: t.Logf})

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
	spec := apiv1.ProfileSpec{Image: agentImage, Harness: claudeCase.harness, Repos: []apiv1.ProfileRepo{{URL: repoURL, Credential: "git"}}, Credentials: []string{"model"}}
	if _, err := c.Profiles().Create(ctx, apiv1.CreateProfileRequest{Name: "agent", Spec: spec}); err != nil {
		t.Fatalf("create profile: %v", err)
	}

	artifacts := artifactsDir(t, "dashboard")
	cfg := map[string]string{
		"baseURL": dev.url, "loginURL": dev.loginLink(t), "cli": filepath.Join(binDir, "engrams"),
		"cliConfig": filepath.Join(dir, "cli.json"), "artifacts": artifacts,
		"profile": "agent", "image": agentImage, "prompt": "create hello.txt with hi", "firstAnswer": "Created hello.txt",
		"changedFile": "hello.txt", "followUp": "what did you create?", "followUpAnswer": "Earlier I created hello.txt",
		"enableRef": reg.Ref("team/debian-extra", "1"), "enableName": "debian-extra",
	}
	runBrowserScript(t, chromium, "dashboard.mjs", cfg, 25*time.Minute)
	t.Logf("screenshots: %s", artifacts)
}

// runBrowserScript runs web/e2e/script with cfg (as a JSON file), its
// output in the test's log; a non-zero exit fails the test.
func runBrowserScript(t *testing.T, chromium, script string, cfg map[string]string, limit time.Duration) {
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
	for sc.Scan() {
		t.Log(sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v (screenshots in %s)", script, err, cfg["artifacts"])
	}
}
