package guest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
)

var shellSpec = harness.BuiltinSpec{Name: harness.BuiltinShell}

func shellConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		WorkDir:      t.TempDir(),
		StateDir:     t.TempDir(),
		HarnessDir:   stageHarness(t, harness.BuiltinSpec{Name: harness.BuiltinShell}, ""),
		GatewayAddr:  "127.0.0.1:0",
		Env:          []string{"PATH=" + os.Getenv("PATH")},
		HarnessGrace: 2 * time.Second,
	}
}

func shellPrompt(turn, text string) guestapi.PromptPayload {
	return guestapi.PromptPayload{Turn: turn, Text: text}
}

// TestHarnessShellTurns runs the shell harness through the daemon: prompts
// applied through the outbox, events read from the streaming GET,
// interrupts of a running and of a queued turn, refused prompts.
func TestHarnessShellTurns(t *testing.T) {
	t.Parallel()
	cfg := shellConfig(t)
	d := startDaemon(t, cfg, true)
	waitGateway(t, d)
	st := d.status()
	if st.State != guestapi.HarnessReady || st.Name != harness.BuiltinShell || st.Protocol != guestapi.HarnessProtocolShell ||
		!strings.HasPrefix(st.Gateway, "http://127.0.0.1:") || st.Turn != "" || st.LastSeq != 0 {
		t.Fatalf("status %+v", st)
	}
	ev := d.follow(0)

	d.apply(promptEntry(1, shellPrompt("t1", "printf 'hi\\n' > hello.txt && echo done")))
	got := ev.untilIdle("t1", 20*time.Second)
	if want := []string{"run_started", "tool_call", "tool_result", "idle"}; !slices.Equal(types(got), want) {
		t.Fatalf("t1 events %v, want %v%s", types(got), want, eventsText(got))
	}
	if idle, _ := eventData[guestapi.IdleData](t, got, guestapi.EventIdle); idle.Result != "done\n" {
		t.Errorf("t1 result %q", idle.Result)
	}
	if rs, _ := eventData[guestapi.RunStartedData](t, got, guestapi.EventRunStarted); rs.Harness != "shell" || rs.Version != "1" {
		t.Errorf("run_started %+v", rs)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.WorkDir, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}

	// Interrupt the running turn.
	d.apply(promptEntry(2, shellPrompt("t2", "echo started; sleep 60")))
	ev.until(10*time.Second, "t2's tool call", func(e guestapi.HarnessEvent) bool { return e.Turn == "t2" && e.Type == guestapi.EventToolCall })
	if st := d.status(); st.Turn != "t2" {
		t.Errorf("status during t2: %+v", st)
	}
	start := time.Now()
	d.apply(interruptEntry(3, "t2"))
	got = ev.untilIdle("t2", 10*time.Second)
	if e, _ := eventData[guestapi.ErrorData](t, got, guestapi.EventError); e.Kind != guestapi.ErrorInterrupted {
		t.Errorf("t2 error %+v%s", e, eventsText(got))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("interrupt took %v", took)
	}

	// A queued turn interrupted by name never starts; "" interrupts the running one.
	d.apply(promptEntry(4, shellPrompt("t3", "sleep 60")), promptEntry(5, shellPrompt("t4", "echo never")), interruptEntry(6, "t4"))
	ev.until(10*time.Second, "t3's tool call", func(e guestapi.HarnessEvent) bool { return e.Turn == "t3" && e.Type == guestapi.EventToolCall })
	d.apply(interruptEntry(7, ""))
	got = ev.untilIdle("t4", 10*time.Second)
	if tt := types(ofTurn(got, "t3")); !slices.Equal(tt, []string{"error", "idle"}) {
		t.Errorf("t3 after the interrupt: %v", tt)
	}
	if tt := types(ofTurn(got, "t4")); !slices.Equal(tt, []string{"error", "idle"}) {
		t.Errorf("t4 (interrupted while queued): %v%s", tt, eventsText(got))
	}

	checkLog(t, d, map[string]int{"t1": 1, "t2": 1, "t3": 1})
}

// TestHarnessBadPrompts: each refused prompt gets bad_prompt and idle, in
// order, and the prompts after them run.
func TestHarnessBadPrompts(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, shellConfig(t), true)
	ev := d.follow(0)
	bad := []guestapi.OutboxEntry{
		promptEntry(1, shellPrompt("b1", "two\nlines")),
		{Seq: 2, ID: "id-2", Kind: guestapi.OutboxPrompt, Payload: []byte(`{"turn":5}`)},
		promptEntry(3, guestapi.PromptPayload{Turn: "b3", Text: "pwd", Workdir: "relative"}),
		promptEntry(4, guestapi.PromptPayload{Turn: "b4", Text: "pwd", Workdir: "/nonexistent-dir"}),
		promptEntry(5, guestapi.PromptPayload{Turn: "b5", Text: "pwd", Env: map[string]string{"BAD-NAME": "x"}}),
		promptEntry(6, shellPrompt("b6", "   ")),
		{Seq: 7, ID: "id-7", Kind: "something.else"},
		promptEntry(8, guestapi.PromptPayload{Turn: "ok", Text: "echo $GREETING", Env: map[string]string{"GREETING": "hello"}}),
	}
	d.apply(bad...)
	got := ev.untilIdle("ok", 20*time.Second)
	var kinds []string
	for _, e := range got {
		if e.Type == guestapi.EventError {
			var ed guestapi.ErrorData
			_ = json.Unmarshal(e.Data, &ed)
			kinds = append(kinds, ed.Kind)
		}
	}
	if want := slices.Repeat([]string{guestapi.ErrorBadPrompt}, 6); !slices.Equal(kinds, want) {
		t.Errorf("errors %v, want %v%s", kinds, want, eventsText(got))
	}
	if idle, _ := eventData[guestapi.IdleData](t, ofTurn(got, "ok"), guestapi.EventIdle); idle.Result != "hello\n" {
		t.Errorf("prompt env: result %q", idle.Result)
	}
	checkLog(t, d, map[string]int{"ok": 1})
}

// checkLog reads the whole log: gap-free seqs from 1, and run_started
// counts per turn as want (turns not listed: none).
func checkLog(t *testing.T, d *testDaemon, want map[string]int) {
	t.Helper()
	head := d.status().LastSeq
	es := d.follow(0)
	all := es.until(10*time.Second, fmt.Sprintf("event %d", head), func(e guestapi.HarnessEvent) bool { return e.Seq == head })
	es.close()
	starts := map[string]int{}
	for i, e := range all {
		if e.Seq != int64(i)+1 {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Type == guestapi.EventRunStarted {
			starts[e.Turn]++
		}
	}
	if fmt.Sprint(starts) != fmt.Sprint(want) {
		t.Errorf("run_started per turn %v, want %v", starts, want)
	}
}

// TestHarnessShellRestart restarts the daemon on the same state: finished
// turns never run again, a prompt applied while no adapter ran is run, a
// turn cut short by the stop is reported interrupted, and a reader ahead
// of the log (a rolled-back guest) streams from the head.
func TestHarnessShellRestart(t *testing.T) {
	t.Parallel()
	cfg := shellConfig(t)
	d := startDaemon(t, cfg, true)
	ev := d.follow(0)
	d.apply(promptEntry(1, shellPrompt("t1", "echo one")), promptEntry(2, shellPrompt("t2", "echo two")))
	ev.untilIdle("t2", 20*time.Second)
	head := d.status().LastSeq
	ev.close()
	d.stop()

	// Only the API: entries are applied (again, and one new), nothing runs.
	d = startDaemon(t, cfg, false)
	if applied := d.apply(promptEntry(1, shellPrompt("t1", "echo one")), promptEntry(2, shellPrompt("t2", "echo two")),
		promptEntry(3, shellPrompt("t3", "echo queued"))); applied != 3 {
		t.Fatalf("applied %d", applied)
	}
	if st := d.status(); st.LastSeq != head || st.Turn != "" {
		t.Fatalf("status without the adapter: %+v (head was %d)", st, head)
	}
	d.stop()

	d = startDaemon(t, cfg, true)
	ev = d.follow(head)
	got := ev.untilIdle("t3", 20*time.Second)
	if got[0].Seq != head+1 || got[0].Turn != "t3" || got[0].Type != guestapi.EventRunStarted {
		t.Fatalf("after the restart: %s", eventsText(got))
	}
	d.apply(promptEntry(4, shellPrompt("t4", "echo started; sleep 60")))
	ev.until(10*time.Second, "t4's tool call", func(e guestapi.HarnessEvent) bool { return e.Turn == "t4" && e.Type == guestapi.EventToolCall })
	ev.close()
	d.stop() // cuts t4 short

	d = startDaemon(t, cfg, true)
	ev = d.follow(head)
	d.apply(promptEntry(5, shellPrompt("t5", "echo five")))
	got = ev.untilIdle("t5", 20*time.Second)
	t4 := ofTurn(got, "t4")
	if tt := types(t4); !slices.Equal(tt, []string{"run_started", "tool_call", "error", "idle"}) {
		t.Fatalf("t4 across the restart: %v%s", tt, eventsText(got))
	}
	if e, _ := eventData[guestapi.ErrorData](t, t4, guestapi.EventError); e.Kind != guestapi.ErrorInterrupted {
		t.Errorf("t4 error %+v", e)
	}
	checkLog(t, d, map[string]int{"t1": 1, "t2": 1, "t3": 1, "t4": 1, "t5": 1})

	// A reader ahead of the log streams from the head.
	last := d.status().LastSeq
	ahead := d.follow(last + 1000)
	if ahead.head != last {
		t.Errorf("head header %d, want %d", ahead.head, last)
	}
	d.apply(promptEntry(6, shellPrompt("t6", "echo six")))
	got = ahead.untilIdle("t6", 20*time.Second)
	if got[0].Seq != last+1 {
		t.Errorf("reader ahead got seq %d first, want %d", got[0].Seq, last+1)
	}
}

// TestHarnessShellFailures: a silent turn is stopped at the stall time, a
// harness that dies mid-turn is reported and started again for the next
// prompt, and without a bundle prompts fail at once.
func TestHarnessShellFailures(t *testing.T) {
	t.Parallel()
	cfg := shellConfig(t)
	cfg.HarnessStall = 500 * time.Millisecond
	d := startDaemon(t, cfg, true)
	ev := d.follow(0)
	d.apply(promptEntry(1, shellPrompt("stall", "sleep 60")), promptEntry(2, shellPrompt("die", "kill -KILL 0")),
		promptEntry(3, shellPrompt("after", "echo alive")))
	got := ev.untilIdle("after", 20*time.Second)
	for turn, want := range map[string]string{"stall": "printed nothing", "die": "ended before the turn did"} {
		e, ok := eventData[guestapi.ErrorData](t, ofTurn(got, turn), guestapi.EventError)
		if !ok || e.Kind != guestapi.ErrorHarness || !strings.Contains(e.Message, want) {
			t.Errorf("%s: error %+v, want kind harness with %q", turn, e, want)
		}
	}
	if idle, _ := eventData[guestapi.IdleData](t, ofTurn(got, "after"), guestapi.EventIdle); idle.Result != "alive\n" {
		t.Errorf("after a dead harness: %s", eventsText(got))
	}

	none := startDaemon(t, Config{WorkDir: t.TempDir(), StateDir: t.TempDir(), HarnessDir: t.TempDir(), GatewayAddr: "127.0.0.1:0"}, true)
	ev = none.follow(0)
	none.apply(promptEntry(1, shellPrompt("t", "echo hi")))
	got = ev.untilIdle("t", 10*time.Second)
	if e, _ := eventData[guestapi.ErrorData](t, got, guestapi.EventError); e.Kind != guestapi.ErrorHarness || !strings.Contains(e.Message, "no harness bundle") {
		t.Errorf("without a bundle: %s", eventsText(got))
	}
}
