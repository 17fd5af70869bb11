package modeltest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/modeltest"
)

// codexScript answers the prompt with the given tool call, the call's result
// with a final message, and a follow-up with its own answer.
func codexScript(call modeltest.ToolCall) []modeltest.Turn {
	return []modeltest.Turn{
		{
			Name:      "write",
			When:      modeltest.UserTextContains("create hello.txt with hi"),
			Text:      "Creating hello.txt.",
			ToolCalls: []modeltest.ToolCall{call},
		},
		{Name: "done", When: modeltest.ToolResultFrom(call.Name), Text: "Created hello.txt containing hi."},
		{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
	}
}

// codexSetup starts a scripted server and a sinkhole and returns the env
// that points codex at them.
func codexSetup(t *testing.T, cfg modeltest.Config, key string) (*modeltest.Server, *modeltest.Sinkhole, []string) {
	t.Helper()
	srv := modeltest.Start(t, cfg)
	sink := modeltest.StartSinkhole(t)
	env, err := modeltest.CodexEnv(t.TempDir(), t.TempDir(), srv.URL()+"/v1", key)
	if err != nil {
		t.Fatal(err)
	}
	return srv, sink, append(env, sink.ProxyEnv()...)
}

func codexCmd(ctx context.Context, bin, repo string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = repo
	cmd.Env = env
	return cmd
}

func TestCodexWritesFileAndResumes(t *testing.T) {
	t.Parallel()
	_, codex := modeltest.RequireCLIs(t)
	tests := []struct {
		name string
		call modeltest.ToolCall
		item string // the codex --json item type the call shows as
	}{
		{
			name: "apply_patch",
			call: modeltest.ToolCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"},
			item: "file_change",
		},
		{
			name: "exec_command",
			call: modeltest.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf 'hi\\n' > hello.txt"}},
			item: "command_execution",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			repo := gitRepo(t)
			srv, sink, env := codexSetup(t, modeltest.Config{APIKey: testKey, Script: codexScript(tt.call), Logf: t.Logf}, testKey)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			run, err := modeltest.RunJSONL(ctx, codexCmd(ctx, codex, repo, env, "exec", "--json", "create hello.txt with hi"), nil)
			if err != nil {
				t.Fatalf("codex exec: %v\n%s", err, run.Output())
			}
			logRun(t, "codex first turn", run)
			if run.ExitCode != 0 {
				t.Fatalf("codex exec exit %d\n%s", run.ExitCode, run.Output())
			}
			b, err := os.ReadFile(filepath.Join(repo, "hello.txt"))
			if err != nil || strings.TrimSpace(string(b)) != "hi" {
				t.Fatalf("hello.txt = %q, %v", b, err)
			}
			if _, ok := run.First(func(l modeltest.Line) bool { return l.Type == "item.completed" && itemType(l) == tt.item }); !ok {
				t.Errorf("no item.completed of type %s: %v", tt.item, run.Types())
			}
			var thread string
			if l, ok := run.First(func(l modeltest.Line) bool { return l.Type == "thread.started" }); !ok || !l.Field("thread_id", &thread) || thread == "" {
				t.Fatalf("no thread_id in thread.started: %v", run.Types())
			}
			recordTestdata(t, "codex-"+tt.name+".jsonl", run)

			first := len(srv.ModelRequests())
			run, err = modeltest.RunJSONL(ctx, codexCmd(ctx, codex, repo, env, "exec", "resume", "--json", thread, "what did you create?"), nil)
			if err != nil {
				t.Fatalf("codex exec resume: %v\n%s", err, run.Output())
			}
			logRun(t, "codex resumed", run)
			if run.ExitCode != 0 {
				t.Fatalf("codex exec resume exit %d\n%s", run.ExitCode, run.Output())
			}
			recordTestdata(t, "codex-"+tt.name+"-resume.jsonl", run)
			assertContinued(t, srv.ModelRequests()[first:], tt.call.Name, "Created hello.txt containing hi.")
			if h := sink.HostNames(); len(h) > 0 {
				t.Errorf("codex tried to reach outside hosts %v", h)
			}
			if u := srv.Unknown(); len(u) > 0 {
				t.Errorf("codex sent %d requests the server has no route for, first %s %s", len(u), u[0].Method, u[0].Path)
			}
		})
	}
}

// itemType is the item.type of a codex item.* line.
func itemType(l modeltest.Line) string {
	var item struct {
		Type string `json:"type"`
	}
	l.Field("item", &item)
	return item.Type
}

// assertContinued checks that the follow-up's model request carried the
// earlier conversation: the first prompt, the tool call and its result, and
// the assistant's final text, then the follow-up.
func assertContinued(t *testing.T, reqs []modeltest.Request, tool, finalText string) {
	t.Helper()
	var follow *modeltest.Request
	for i := range reqs {
		if reqs[i].Turn == "followup" {
			follow = &reqs[i]
		}
	}
	if follow == nil {
		turns := []string{}
		for _, r := range reqs {
			turns = append(turns, r.Turn)
		}
		t.Fatalf("no follow-up model request among %d (turns %v)", len(reqs), turns)
	}
	if follow.APIKey != testKey {
		t.Errorf("follow-up key = %q, want %q", follow.APIKey, testKey)
	}
	var sawPrompt, sawCall, sawResult, sawFinal bool
	for _, m := range follow.Messages {
		sawPrompt = sawPrompt || (m.Role == "user" && strings.Contains(m.Text, "create hello.txt with hi"))
		sawFinal = sawFinal || (m.Role == "assistant" && strings.Contains(m.Text, finalText))
		for _, c := range m.ToolCalls {
			sawCall = sawCall || c.Name == tool
		}
		for _, r := range m.ToolResults {
			sawResult = sawResult || r.Name == tool
		}
	}
	if !sawPrompt || !sawCall || !sawResult || !sawFinal {
		t.Errorf("follow-up request lacks earlier turns: prompt=%v call=%v result=%v final=%v (%d messages)",
			sawPrompt, sawCall, sawResult, sawFinal, len(follow.Messages))
	}
	if !strings.Contains(follow.LatestUserText(), "what did you create") {
		t.Errorf("follow-up latest user text = %q", follow.LatestUserText())
	}
}

func TestCodexWrongKeyFailsFast(t *testing.T) {
	t.Parallel()
	_, codex := modeltest.RequireCLIs(t)
	repo := gitRepo(t)
	srv, _, env := codexSetup(t, modeltest.Config{APIKey: "the-real-key", Logf: t.Logf}, "a-wrong-key")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	run, err := modeltest.RunJSONL(ctx, codexCmd(ctx, codex, repo, env, "exec", "--json", "create hello.txt with hi"), nil)
	if err != nil {
		t.Fatalf("codex exec: %v\n%s", err, run.Output())
	}
	logRun(t, "codex wrong key", run)
	recordTestdata(t, "codex-wrong-key.jsonl", run)
	if run.ExitCode == 0 {
		t.Errorf("codex exit 0 with a wrong key")
	}
	if run.Duration > 30*time.Second {
		t.Errorf("codex took %v to fail with a wrong key", run.Duration)
	}
	var all strings.Builder
	for _, l := range run.Lines {
		all.Write(l.Raw)
	}
	if !strings.Contains(all.String(), "401") && !strings.Contains(strings.ToLower(all.String()), "api key") {
		t.Errorf("no 401 or API key message in the events: %v\n%s", run.Types(), run.Output())
	}
	reqs := srv.ModelRequests()
	if len(reqs) == 0 || reqs[0].APIKey != "a-wrong-key" || reqs[0].Status != 401 {
		t.Errorf("server saw %d model requests, want a 401 for a-wrong-key", len(reqs))
	}
}
