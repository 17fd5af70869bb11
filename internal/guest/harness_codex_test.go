package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/modeltest"
)

// The real codex CLI as the adapter runs it: one `codex app-server` process
// per conversation, serving turn after turn.

// harnessPID is the harness process the adapter recorded as running.
func harnessPID(t *testing.T, stateDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "harness.pid"))
	if err != nil {
		t.Fatalf("no running harness process recorded: %v", err)
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 1 {
		t.Fatalf("harness.pid %q", b)
	}
	return pid
}

// summary renders a turn's events as "type:detail".
func summary(t *testing.T, evs []guestapi.HarnessEvent) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		s := e.Type
		switch e.Type {
		case guestapi.EventAssistantText:
			d, _ := eventData[guestapi.AssistantTextData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += ":" + d.Text
		case guestapi.EventToolCall:
			d, _ := eventData[guestapi.ToolCallData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += ":" + d.Name
		case guestapi.EventToolResult:
			d, _ := eventData[guestapi.ToolResultData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += fmt.Sprintf(":error=%v", d.IsError)
		case guestapi.EventFileChanged:
			d, _ := eventData[guestapi.FileChangedData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += ":" + d.Change + " " + d.Path
		case guestapi.EventError:
			d, _ := eventData[guestapi.ErrorData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += ":" + d.Kind
		case guestapi.EventIdle:
			d, _ := eventData[guestapi.IdleData](t, []guestapi.HarnessEvent{e}, e.Type)
			s += ":" + d.Result
		}
		out = append(out, s)
	}
	return out
}

func TestHarnessCodexAppServer(t *testing.T) {
	t.Parallel()
	hdir := stageCLI(t, harness.BuiltinSpec{Name: harness.BuiltinCodex, Version: modeltest.CodexVersion})
	// The first turn's events are those codex exec --json gave for the same
	// run (see modeltest/testdata/codex-*.jsonl).
	tests := []struct {
		name string
		call modeltest.ToolCall
		want []string
	}{
		{"apply_patch", modeltest.ToolCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"}, []string{
			"run_started", "assistant_text:I'll create the file.", "tool_call:apply_patch", "tool_result:error=false",
			"file_changed:create hello.txt", "assistant_text:Created hello.txt containing hi.", "usage", "idle:Created hello.txt containing hi.",
		}},
		{"exec_command", modeltest.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf 'hi\\n' > hello.txt"}}, []string{
			"run_started", "assistant_text:I'll create the file.", "tool_call:shell", "tool_result:error=false",
			"assistant_text:Created hello.txt containing hi.", "usage", "idle:Created hello.txt containing hi.",
		}},
	}
	for _, tt := range tests {
		t.Run("one process, "+tt.name, func(t *testing.T) {
			t.Parallel()
			runCodexOneProcess(t, hdir, tt.call, tt.want)
		})
	}
	t.Run("interrupt", func(t *testing.T) {
		t.Parallel()
		runCodexInterrupt(t, hdir)
	})
	t.Run("restarted after it died", func(t *testing.T) {
		t.Parallel()
		runCodexRestart(t, hdir)
	})
}

const codexPH = "placeholder-for-the-session"

func codexPrompt(seq int64, turn, text string) guestapi.OutboxEntry {
	return promptEntry(seq, guestapi.PromptPayload{Turn: turn, Text: text, Credentials: map[string]string{"openai_api_key": codexPH}})
}

// runCodexOneProcess: two turns served by the same process, the second
// model request carrying the first turn.
func runCodexOneProcess(t *testing.T, hdir string, call modeltest.ToolCall, want []string) {
	r := newCLIRig(t, hdir, helloScript(call), codexPH, realKey, false)
	ev := r.d.follow(0)
	r.d.apply(codexPrompt(1, "t1", "create hello.txt with hi"))
	got := ev.untilIdle("t1", 2*time.Minute)
	if s := summary(t, got); !slices.Equal(s, want) {
		t.Errorf("t1 events\n%q\nwant\n%q", s, want)
	}
	if b, err := os.ReadFile(filepath.Join(r.cfg.WorkDir, "hello.txt")); err != nil || strings.TrimSpace(string(b)) != "hi" {
		t.Errorf("hello.txt = %q, %v", b, err)
	}
	first, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted)
	pid := harnessPID(t, r.cfg.StateDir)

	start := time.Now()
	r.d.apply(codexPrompt(2, "t2", "what did you create?"))
	got = ofTurn(ev.untilIdle("t2", 2*time.Minute), "t2")
	t.Logf("second turn took %v", time.Since(start))
	if s := summary(t, got); !slices.Equal(s, []string{"run_started", "assistant_text:Earlier I created hello.txt.", "usage", "idle:Earlier I created hello.txt."}) {
		t.Errorf("t2 events %q", s)
	}
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Conversation != first.Conversation || first.Conversation == "" {
		t.Errorf("t2 conversation %q, t1's %q", rs.Conversation, first.Conversation)
	}
	if again := harnessPID(t, r.cfg.StateDir); again != pid {
		t.Errorf("turn 2 ran in process %d, turn 1 in %d", again, pid)
	}
	checkContinued(t, r.model.ModelRequests(), call.Name)
	r.checkOffline(t)
}

// runCodexInterrupt interrupts a turn waiting for the model: codex ends
// the turn, and its process serves the next one, continuing the thread.
func runCodexInterrupt(t *testing.T, hdir string) {
	// The follow-up comes first: codex keeps the interrupted prompt in the
	// thread, so the next request's latest user input holds both.
	r := newCLIRig(t, hdir, []modeltest.Turn{
		{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
		{Name: "slow", When: modeltest.UserTextContains("take your time"), Text: "too late", Delay: time.Minute},
	}, codexPH, realKey, false)
	ev := r.d.follow(0)
	r.d.apply(codexPrompt(1, "t1", "take your time"))
	waitFor(t, "codex's model request", func() bool {
		return slices.ContainsFunc(r.host.requested(), func(p string) bool { return strings.HasSuffix(p, "/responses") })
	})
	pid := harnessPID(t, r.cfg.StateDir)
	start := time.Now()
	r.d.apply(interruptEntry(2, "t1"))
	got := ev.untilIdle("t1", 30*time.Second)
	took := time.Since(start)
	if s := summary(t, got); !slices.Equal(s, []string{"run_started", "error:interrupted", "idle:"}) {
		t.Errorf("t1 events %q", s)
	}
	if took > 5*time.Second {
		t.Errorf("the interrupt took %v", took)
	}
	t.Logf("interrupted in %v", took)
	first, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted)

	r.d.apply(codexPrompt(3, "t2", "what did you create?"))
	got = ofTurn(ev.untilIdle("t2", 2*time.Minute), "t2")
	if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "Earlier I created hello.txt." {
		t.Errorf("t2: %s", eventsText(got))
	}
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Conversation != first.Conversation || first.Conversation == "" {
		t.Errorf("conversation %q after the interrupt, was %q", rs.Conversation, first.Conversation)
	}
	if again := harnessPID(t, r.cfg.StateDir); again != pid {
		t.Errorf("after the interrupt process %d serves, was %d", again, pid)
	}
	r.checkOffline(t)
}

// runCodexRestart kills the app-server between turns: the next turn starts
// it again, resuming the thread.
func runCodexRestart(t *testing.T, hdir string) {
	patch := modeltest.ToolCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"}
	r := newCLIRig(t, hdir, helloScript(patch), codexPH, realKey, false)
	ev := r.d.follow(0)
	r.d.apply(codexPrompt(1, "t1", "create hello.txt with hi"))
	first := checkFirstTurn(t, ev.untilIdle("t1", 2*time.Minute), r.cfg.WorkDir, "apply_patch")
	pid := harnessPID(t, r.cfg.StateDir)
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil {
		t.Fatalf("kill codex: %v", err)
	}

	r.d.apply(codexPrompt(2, "t2", "what did you create?"))
	got := ofTurn(ev.untilIdle("t2", 2*time.Minute), "t2")
	if s := summary(t, got); !slices.Equal(s, []string{"run_started", "assistant_text:Earlier I created hello.txt.", "usage", "idle:Earlier I created hello.txt."}) {
		t.Errorf("t2 events %q", s)
	}
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Conversation != first.Conversation || first.Conversation == "" {
		t.Errorf("conversation %q after the restart, was %q", rs.Conversation, first.Conversation)
	}
	if again := harnessPID(t, r.cfg.StateDir); again == pid {
		t.Errorf("process %d still serves after it was killed", pid)
	}
	checkContinued(t, r.model.ModelRequests(), patch.Name)
	r.checkOffline(t)
}

// TestCodexTurnOverhead measures a codex turn's wall time run directly
// (`codex exec --json`, one process a turn, against the scripted server)
// and through the adapter (prompt applied to idle recorded, the turn served
// by the conversation's app-server process, its model requests through the
// daemon's gateway and a host tunnel). Gated by ENGRAMS_BENCH=1; not
// parallel, so that no other test shares the cores while it measures.
func TestCodexTurnOverhead(t *testing.T) {
	if os.Getenv("ENGRAMS_BENCH") != "1" {
		t.Skip("set ENGRAMS_BENCH=1 to measure")
	}
	const turns = 9
	hdir := stageCLI(t, harness.BuiltinSpec{Name: harness.BuiltinCodex, Version: modeltest.CodexVersion})
	_, codexBin := modeltest.RequireCLIs(t)
	script := []modeltest.Turn{{Name: "hello", Text: "Hello from the scripted model."}}
	r := newCLIRig(t, hdir, script, codexPH, realKey, false)

	env, err := modeltest.CodexEnv(t.TempDir(), t.TempDir(), r.model.URL()+"/v1", realKey)
	if err != nil {
		t.Fatal(err)
	}
	var direct []time.Duration
	for i := 0; i <= turns; i++ { // the first run warms the caches
		cmd := exec.Command(codexBin, "exec", "--json", "--skip-git-repo-check", "say hello")
		cmd.Dir, cmd.Env = r.cfg.WorkDir, env
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("codex exec: %v\n%s", err, out)
		}
		if i > 0 {
			direct = append(direct, time.Since(start))
		}
	}

	ev := r.d.follow(0)
	var adapter []time.Duration
	var first time.Duration
	for i := 0; i <= turns; i++ { // the first turn starts the app-server
		turn := fmt.Sprintf("t%d", i+1)
		start := time.Now()
		r.d.apply(codexPrompt(int64(i+1), turn, "say hello"))
		got := ofTurn(ev.untilIdle(turn, time.Minute), turn)
		took := time.Since(start)
		if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "Hello from the scripted model." {
			t.Fatalf("%s: %s", turn, eventsText(got))
		}
		if i == 0 {
			first = took
		} else {
			adapter = append(adapter, took)
		}
	}
	dm, am := percentile(direct, 50), percentile(adapter, 50)
	t.Logf("codex %s, %d turns each after one warm-up\n"+
		"| path | median | p95 |\n| --- | --- | --- |\n"+
		"| codex exec --json, one process a turn | %v | %v |\n"+
		"| adapter, app-server process kept | %v | %v |\n"+
		"ratio of medians (adapter / direct): %.2f; the adapter's first turn (starting app-server): %v",
		modeltest.CodexVersion, turns, dm, percentile(direct, 95), am, percentile(adapter, 95), float64(am)/float64(dm), first.Round(time.Millisecond))
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}
