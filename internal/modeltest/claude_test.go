package modeltest_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/modeltest"
)

// claudeScript writes hello.txt with a Write tool call, then ends the turn;
// a follow-up asking what was created gets its own answer.
func claudeScript(repo string) []modeltest.Turn {
	return []modeltest.Turn{
		{
			Name:      "write",
			When:      modeltest.UserTextContains("create hello.txt with hi"),
			Text:      "I'll create the file.",
			ToolCalls: []modeltest.ToolCall{{Name: "Write", Input: map[string]any{"file_path": filepath.Join(repo, "hello.txt"), "content": "hi\n"}}},
		},
		{Name: "done", When: modeltest.ToolResultFrom("Write"), Text: "Created hello.txt containing hi."},
		{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
	}
}

func claudeCmd(ctx context.Context, bin, repo string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = repo
	cmd.Env = env
	return cmd
}

func TestClaudeWritesFileAndResumes(t *testing.T) {
	t.Parallel()
	claude, _ := modeltest.RequireCLIs(t)
	repo := gitRepo(t)
	srv := modeltest.Start(t, modeltest.Config{APIKey: testKey, Script: claudeScript(repo), Logf: t.Logf})
	sink := modeltest.StartSinkhole(t)
	env := append(modeltest.ClaudeEnv(t.TempDir(), srv.URL(), testKey), sink.ProxyEnv()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	run, err := modeltest.RunJSONL(ctx, claudeCmd(ctx, claude, repo, env,
		"-p", "create hello.txt with hi", "--output-format", "stream-json", "--verbose",
		"--permission-mode", "acceptEdits"), nil)
	if err != nil {
		t.Fatalf("claude: %v\n%s", err, run.Output())
	}
	logRun(t, "claude first turn", run)
	if run.ExitCode != 0 {
		t.Fatalf("claude exit %d\n%s", run.ExitCode, run.Output())
	}
	assertHello(t, repo)
	session := claudeSession(t, run)
	recordTestdata(t, "claude-print.jsonl", run)

	first := len(srv.ModelRequests())
	run, err = modeltest.RunJSONL(ctx, claudeCmd(ctx, claude, repo, env,
		"-p", "what did you create?", "--resume", session, "--output-format", "stream-json", "--verbose",
		"--permission-mode", "acceptEdits"), nil)
	if err != nil {
		t.Fatalf("claude --resume: %v\n%s", err, run.Output())
	}
	logRun(t, "claude resumed", run)
	if run.ExitCode != 0 {
		t.Fatalf("claude --resume exit %d\n%s", run.ExitCode, run.Output())
	}
	t.Logf("session %s resumed as %s", session, claudeSession(t, run))
	recordTestdata(t, "claude-print-resume.jsonl", run)
	assertContinued(t, srv.ModelRequests()[first:], "Write", "Created hello.txt containing hi.")
	if h := sink.HostNames(); len(h) > 0 {
		t.Errorf("claude tried to reach outside hosts %v", h)
	}
	if u := srv.Unknown(); len(u) > 0 {
		t.Errorf("claude sent %d requests the server has no route for, first %s %s", len(u), u[0].Method, u[0].Path)
	}
}

// TestClaudeStreamJSONInput drives one long-lived claude process the way the
// harness adapter will: prompts as stream-json lines on stdin, each sent
// after the previous turn's result line, partial messages streamed.
func TestClaudeStreamJSONInput(t *testing.T) {
	t.Parallel()
	claude, _ := modeltest.RequireCLIs(t)
	repo := gitRepo(t)
	srv := modeltest.Start(t, modeltest.Config{APIKey: testKey, Script: claudeScript(repo), Logf: t.Logf})
	sink := modeltest.StartSinkhole(t)
	env := append(modeltest.ClaudeEnv(t.TempDir(), srv.URL(), testKey), sink.ProxyEnv()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cmd := claudeCmd(ctx, claude, repo, env, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--include-partial-messages", "--permission-mode", "acceptEdits")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	prompts := []string{"create hello.txt with hi", "what did you create?"}
	send := func(text string) {
		b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Errorf("write prompt: %v", err)
		}
	}
	send(prompts[0])
	results := 0
	run, err := modeltest.RunJSONL(ctx, cmd, func(l modeltest.Line) {
		if l.Type != "result" {
			return
		}
		results++
		if results < len(prompts) {
			send(prompts[results])
			return
		}
		_ = stdin.Close()
	})
	if err != nil {
		t.Fatalf("claude: %v\n%s", err, run.Output())
	}
	logRun(t, "claude stream-json", run)
	if run.ExitCode != 0 || results != len(prompts) {
		t.Fatalf("claude exit %d after %d results\n%s", run.ExitCode, results, run.Output())
	}
	assertHello(t, repo)
	recordTestdata(t, "claude-stream-input.jsonl", run)
	assertContinued(t, srv.ModelRequests(), "Write", "Created hello.txt containing hi.")
	if _, ok := run.First(func(l modeltest.Line) bool { return l.Type == "stream_event" }); !ok {
		t.Errorf("no stream_event lines with --include-partial-messages: %v", run.Types())
	}
	if h := sink.HostNames(); len(h) > 0 {
		t.Errorf("claude tried to reach outside hosts %v", h)
	}
}

func assertHello(t *testing.T, repo string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "hello.txt"))
	if err != nil || strings.TrimSpace(string(b)) != "hi" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
}

// claudeSession is the session_id of a run's system init line.
func claudeSession(t *testing.T, run *modeltest.Run) string {
	t.Helper()
	var session string
	l, ok := run.First(func(l modeltest.Line) bool { return l.Type == "system" })
	if !ok || !l.Field("session_id", &session) || session == "" {
		t.Fatalf("no session_id in a system line: %v", run.Types())
	}
	return session
}

// TestClaudeWrongKeyFailsFast: claude retries a 401 like a 5xx (10 times by
// default, with backoff, about two minutes), so a wrong key alone is no quick
// failure. It fails within seconds when the answer says x-should-retry: false
// (which a gateway can add) or when CLAUDE_CODE_MAX_RETRIES=0; and in every
// case the first 401 shows at once as a system/api_retry line.
func TestClaudeWrongKeyFailsFast(t *testing.T) {
	t.Parallel()
	claude, _ := modeltest.RequireCLIs(t)
	tests := []struct {
		name        string
		shouldRetry string
		env         []string
		exits       bool // exits within the time bound (else: stopped after the first retry line)
	}{
		{name: "x-should-retry false", shouldRetry: "false", exits: true},
		{name: "max retries 0", env: []string{"CLAUDE_CODE_MAX_RETRIES=0"}, exits: true},
		{name: "default retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			repo := gitRepo(t)
			srv := modeltest.Start(t, modeltest.Config{APIKey: "the-real-key", XShouldRetry: tt.shouldRetry, Logf: t.Logf})
			env := append(modeltest.ClaudeEnv(t.TempDir(), srv.URL(), "a-wrong-key"), tt.env...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			runCtx, stop := context.WithCancel(ctx)
			defer stop()

			cmd := claudeCmd(runCtx, claude, repo, env, "-p", "create hello.txt with hi", "--output-format", "stream-json", "--verbose")
			run, err := modeltest.RunJSONL(runCtx, cmd, func(l modeltest.Line) {
				if !tt.exits && l.Type == "system" && strings.Contains(string(l.Raw), "api_retry") {
					stop()
				}
			})
			if err != nil && tt.exits {
				t.Fatalf("claude: %v\n%s", err, run.Output())
			}
			logRun(t, "claude wrong key", run)
			recordTestdata(t, "claude-wrong-key-"+strings.ReplaceAll(tt.name, " ", "-")+".jsonl", run)
			if run.Duration > 30*time.Second {
				t.Errorf("claude took %v", run.Duration)
			}
			// Exiting: a result line with is_error, api_error_status 401 and
			// "Invalid API key · Fix external API key". Retrying: a system
			// line, subtype api_retry, error "authentication_failed".
			want, text := "result", "invalid api key"
			if !tt.exits {
				want, text = "system", "authentication_failed"
			}
			l, ok := run.First(func(l modeltest.Line) bool {
				return l.Type == want && strings.Contains(strings.ToLower(string(l.Raw)), text)
			})
			if !ok {
				t.Fatalf("no %s line with %q: %v\n%s", want, text, run.Types(), run.Output())
			}
			t.Logf("auth failure visible after %v: %.400s", l.At, l.Raw)
			if tt.exits && run.ExitCode == 0 {
				t.Errorf("claude exit 0 with a wrong key")
			}
			reqs := srv.ModelRequests()
			if len(reqs) == 0 || reqs[0].APIKey != "a-wrong-key" || reqs[0].Status != 401 {
				t.Errorf("server saw %d model requests, want a 401 for a-wrong-key", len(reqs))
			}
		})
	}
}
