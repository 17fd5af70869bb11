package guest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/modeltest"
	"github.com/engrams/engrams/internal/testutil"
)

// The real claude and codex CLIs run as the guest adapter runs them, from
// a bundle tree staged as the registry builds it, reaching a scripted model
// server only through the daemon's gateway listener and a tunnel the test
// opens as the host would.

const realKey = "the-real-key"

// stageCLI stages a built-in harness from the npm cache the harness tests
// share (downloading into it when needed). The staged tree is kept under
// the test cache, one per version, so later runs skip the staging.
func stageCLI(t *testing.T, spec harness.BuiltinSpec) string {
	t.Helper()
	modeltest.RequireCLIs(t)
	dir := filepath.Join(modeltest.CacheDir(), "guest-harness", spec.Name+"@"+spec.Version)
	if d, err := guestapi.LoadHarnessDescriptor(dir); err == nil && d.Version == spec.Version {
		return dir
	}
	b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: filepath.Join(modeltest.CacheDir(), "harness-probe")}, harness.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".stage-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := b.StageBuiltin(ctx, spec, tmp); errors.Is(err, harness.ErrRegistry) {
		testutil.SkipOrFail(t, "the npm registry is unreachable: %v", err)
	} else if err != nil {
		t.Fatalf("stage %s: %v", spec.Name, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, lerr := guestapi.LoadHarnessDescriptor(dir); lerr != nil { // not another run staging it meanwhile
			t.Fatalf("keep the staged %s: %v", spec.Name, err)
		}
	}
	return dir
}

// cliRig is a daemon running a real CLI harness against a scripted server.
type cliRig struct {
	cfg   Config
	d     *testDaemon
	model *modeltest.Server
	sink  *modeltest.Sinkhole
	host  *fakeHost
	hcfg  fakeHostConfig
}

func newCLIRig(t *testing.T, hdir string, script []modeltest.Turn, placeholder, key string, retryAuth bool) *cliRig {
	t.Helper()
	work, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &cliRig{model: modeltest.Start(t, modeltest.Config{APIKey: realKey, Script: script, Logf: t.Logf}), sink: modeltest.StartSinkhole(t)}
	r.cfg = Config{
		WorkDir: work, StateDir: t.TempDir(), HarnessDir: hdir, GatewayAddr: "127.0.0.1:0",
		Env: append([]string{"PATH=" + os.Getenv("PATH")}, r.sink.ProxyEnv()...), HarnessGrace: 3 * time.Second,
	}
	r.hcfg = fakeHostConfig{upstream: r.model.URL(), keys: map[string]string{placeholder: key}, pool: 4, retryAuth: retryAuth}
	r.start(t)
	return r
}

// start runs a daemon on the rig's state (again, after restart's stop).
func (r *cliRig) start(t *testing.T) {
	t.Helper()
	r.d = startDaemon(t, r.cfg, true)
	r.host = startFakeHost(t, r.d.addr, r.hcfg)
}

func (r *cliRig) restart(t *testing.T) {
	t.Helper()
	r.host.stop()
	r.d.stop()
	r.start(t)
}

func (r *cliRig) checkOffline(t *testing.T) {
	t.Helper()
	if h := r.sink.HostNames(); len(h) > 0 {
		t.Errorf("the harness tried to reach outside hosts %v", h)
	}
	for _, p := range r.host.requested() {
		if !strings.HasPrefix(p, "/anthropic_api_key/") && !strings.HasPrefix(p, "/openai_api_key/") {
			t.Errorf("gateway request %s names no credential kind", p)
		}
	}
}

// helloScript writes hello.txt with the given tool call, then answers.
func helloScript(call modeltest.ToolCall) []modeltest.Turn {
	return []modeltest.Turn{
		{Name: "write", When: modeltest.UserTextContains("create hello.txt with hi"), Text: "I'll create the file.", ToolCalls: []modeltest.ToolCall{call}},
		{Name: "done", When: modeltest.ToolResultFrom(call.Name), Text: "Created hello.txt containing hi."},
		{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
	}
}

// checkFirstTurn checks the events of "create hello.txt with hi".
func checkFirstTurn(t *testing.T, evs []guestapi.HarnessEvent, work, tool string) guestapi.RunStartedData {
	t.Helper()
	tt := types(evs)
	for _, want := range []string{guestapi.EventRunStarted, guestapi.EventToolCall, guestapi.EventToolResult, guestapi.EventFileChanged, guestapi.EventAssistantText, guestapi.EventUsage, guestapi.EventIdle} {
		if !slices.Contains(tt, want) {
			t.Errorf("no %s event: %s", want, eventsText(evs))
		}
	}
	if tt[0] != guestapi.EventRunStarted || tt[len(tt)-1] != guestapi.EventIdle || slices.Contains(tt, guestapi.EventError) {
		t.Errorf("events %v", tt)
	}
	if call, _ := eventData[guestapi.ToolCallData](t, evs, guestapi.EventToolCall); call.Name != tool {
		t.Errorf("tool call %+v, want %s", call, tool)
	}
	if fc, _ := eventData[guestapi.FileChangedData](t, evs, guestapi.EventFileChanged); fc != (guestapi.FileChangedData{Path: "hello.txt", Change: guestapi.ChangeCreate}) {
		t.Errorf("file_changed %+v", fc)
	}
	if idle, _ := eventData[guestapi.IdleData](t, evs, guestapi.EventIdle); idle.Result != "Created hello.txt containing hi." {
		t.Errorf("idle %+v", idle)
	}
	if b, err := os.ReadFile(filepath.Join(work, "hello.txt")); err != nil || strings.TrimSpace(string(b)) != "hi" {
		t.Errorf("hello.txt = %q, %v", b, err)
	}
	rs, _ := eventData[guestapi.RunStartedData](t, evs, guestapi.EventRunStarted)
	return rs
}

// checkContinued checks that the last follow-up model request carried the
// first turn: its prompt, the tool call and result, the final text.
func checkContinued(t *testing.T, reqs []modeltest.Request, tool string) {
	t.Helper()
	var follow *modeltest.Request
	for i := range reqs {
		if reqs[i].Turn == "followup" {
			follow = &reqs[i]
		}
	}
	if follow == nil {
		t.Fatalf("no follow-up model request among %d", len(reqs))
	}
	var prompt, call, result, final bool
	for _, m := range follow.Messages {
		prompt = prompt || (m.Role == "user" && strings.Contains(m.Text, "create hello.txt with hi"))
		final = final || (m.Role == "assistant" && strings.Contains(m.Text, "Created hello.txt containing hi."))
		for _, c := range m.ToolCalls {
			call = call || c.Name == tool
		}
		for _, r := range m.ToolResults {
			result = result || r.Name == tool
		}
	}
	if !prompt || !call || !result || !final || follow.APIKey != realKey {
		t.Errorf("follow-up request: prompt=%v call=%v result=%v final=%v key=%q", prompt, call, result, final, follow.APIKey)
	}
}

type cliCase struct {
	spec harness.BuiltinSpec
	kind string // credential kind
	call modeltest.ToolCall
	tool string // tool call name in the events
}

func runCLIConversation(t *testing.T, hdir string, c cliCase, work func(string) modeltest.ToolCall) {
	t.Helper()
	const ph = "placeholder-for-the-session"
	r := newCLIRig(t, hdir, nil, ph, realKey, false)
	r.model.SetScript(helloScript(work(r.cfg.WorkDir)))
	prompt := func(seq int64, turn, text string) guestapi.OutboxEntry {
		return promptEntry(seq, guestapi.PromptPayload{Turn: turn, Text: text, Credentials: map[string]string{c.kind: ph}})
	}
	ev := r.d.follow(0)
	start := time.Now()
	r.d.apply(prompt(1, "t1", "create hello.txt with hi"))
	first := checkFirstTurn(t, ev.untilIdle("t1", 2*time.Minute), r.cfg.WorkDir, c.tool)
	t.Logf("first turn took %v", time.Since(start))
	if first.Conversation == "" || first.Harness != c.spec.Name || first.Model == "" || first.Mode == "" {
		t.Errorf("run_started %+v", first)
	}

	r.d.apply(prompt(2, "t2", "what did you create?"))
	got := ev.untilIdle("t2", 2*time.Minute)
	if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "Earlier I created hello.txt." {
		t.Errorf("t2: %s", eventsText(got))
	}
	checkContinued(t, r.model.ModelRequests(), c.call.Name)
	ev.close()

	// A new daemon process continues the same conversation.
	r.restart(t)
	before := len(r.model.ModelRequests())
	ev = r.d.follow(0)
	r.d.apply(prompt(3, "t3", "what did you create?"))
	got = ofTurn(ev.untilIdle("t3", 2*time.Minute), "t3")
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Conversation != first.Conversation {
		t.Errorf("after a restart the conversation is %q, want %q", rs.Conversation, first.Conversation)
	}
	if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "Earlier I created hello.txt." {
		t.Errorf("t3: %s", eventsText(got))
	}
	checkContinued(t, r.model.ModelRequests()[before:], c.call.Name)
	r.checkOffline(t)
}

func runCLIWrongKey(t *testing.T, hdir string, c cliCase, retryAuth bool) {
	t.Helper()
	const ph = "placeholder-for-the-session"
	r := newCLIRig(t, hdir, helloScript(c.call), ph, "a-wrong-key", retryAuth)
	ev := r.d.follow(0)
	start := time.Now()
	r.d.apply(promptEntry(1, guestapi.PromptPayload{Turn: "t1", Text: "create hello.txt with hi", Credentials: map[string]string{c.kind: ph}}))
	got := ev.untilIdle("t1", time.Minute)
	took := time.Since(start)
	e, ok := eventData[guestapi.ErrorData](t, got, guestapi.EventError)
	if !ok || e.Kind != guestapi.ErrorAuth || e.Status != 401 {
		t.Errorf("error %+v: %s", e, eventsText(got))
	}
	if took > 20*time.Second {
		t.Errorf("a wrong key took %v to fail", took)
	}
	t.Logf("auth failure reported after %v: %+v", took, e)
	reqs := r.model.ModelRequests()
	if len(reqs) == 0 || reqs[0].APIKey != "a-wrong-key" || reqs[0].Status != 401 {
		t.Errorf("the model server saw %d requests, want a 401 for the wrong key", len(reqs))
	}
	r.checkOffline(t)
}

func TestHarnessClaudeCLI(t *testing.T) {
	t.Parallel()
	hdir := stageCLI(t, harness.BuiltinSpec{Name: harness.BuiltinClaudeCode, Version: modeltest.ClaudeVersion})
	c := cliCase{spec: harness.BuiltinSpec{Name: harness.BuiltinClaudeCode}, kind: "anthropic_api_key", tool: "Write", call: modeltest.ToolCall{Name: "Write"}}
	write := func(work string) modeltest.ToolCall {
		return modeltest.ToolCall{Name: "Write", Input: map[string]any{"file_path": filepath.Join(work, "hello.txt"), "content": "hi\n"}}
	}
	t.Run("conversation", func(t *testing.T) {
		t.Parallel()
		runCLIConversation(t, hdir, c, write)
	})
	t.Run("interrupt", func(t *testing.T) {
		t.Parallel()
		runClaudeInterrupt(t, hdir)
	})
	for _, retry := range []bool{false, true} {
		name := "wrong key, gateway says no retry"
		if retry {
			name = "wrong key, claude would retry"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runCLIWrongKey(t, hdir, c, retry)
		})
	}
}

func TestHarnessCodexCLI(t *testing.T) {
	t.Parallel()
	hdir := stageCLI(t, harness.BuiltinSpec{Name: harness.BuiltinCodex, Version: modeltest.CodexVersion})
	patch := modeltest.ToolCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"}
	c := cliCase{spec: harness.BuiltinSpec{Name: harness.BuiltinCodex}, kind: "openai_api_key", tool: "apply_patch", call: patch}
	t.Run("conversation", func(t *testing.T) {
		t.Parallel()
		runCLIConversation(t, hdir, c, func(string) modeltest.ToolCall { return patch })
	})
	t.Run("wrong key", func(t *testing.T) {
		t.Parallel()
		runCLIWrongKey(t, hdir, c, true)
	})
}

// runClaudeInterrupt interrupts a turn waiting for the model: claude is
// stopped, and the next prompt continues the conversation in a new process.
func runClaudeInterrupt(t *testing.T, hdir string) {
	const ph = "placeholder-for-the-session"
	r := newCLIRig(t, hdir, []modeltest.Turn{
		{Name: "slow", When: modeltest.UserTextContains("take your time"), Text: "too late", Delay: time.Minute},
		{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
	}, ph, realKey, false)
	prompt := func(seq int64, turn, text string) guestapi.OutboxEntry {
		return promptEntry(seq, guestapi.PromptPayload{Turn: turn, Text: text, Credentials: map[string]string{"anthropic_api_key": ph}})
	}
	ev := r.d.follow(0)
	r.d.apply(prompt(1, "t1", "take your time"))
	waitFor(t, "claude's model request", func() bool {
		return slices.ContainsFunc(r.host.requested(), func(p string) bool { return strings.HasSuffix(p, "/v1/messages") })
	})
	start := time.Now()
	r.d.apply(interruptEntry(2, "t1"))
	got := ev.untilIdle("t1", 30*time.Second)
	if e, _ := eventData[guestapi.ErrorData](t, got, guestapi.EventError); e.Kind != guestapi.ErrorInterrupted {
		t.Errorf("t1: %s", eventsText(got))
	}
	t.Logf("interrupted in %v", time.Since(start))
	first, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted)

	r.d.apply(prompt(3, "t2", "what did you create?"))
	got = ev.untilIdle("t2", 2*time.Minute)
	if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "Earlier I created hello.txt." {
		t.Errorf("t2: %s", eventsText(got))
	}
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Conversation != first.Conversation || first.Conversation == "" {
		t.Errorf("conversation %q after the interrupt, was %q", rs.Conversation, first.Conversation)
	}
	r.checkOffline(t)
}
