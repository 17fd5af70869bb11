package guest

import (
	"fmt"
	"os"
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
