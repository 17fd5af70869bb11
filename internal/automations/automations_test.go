package automations

import (
	"errors"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
)

// review is a valid definition: a PR review on a deny-by-default profile.
const review = `
name: pr-review
trigger: {kind: github_pr, repos: [acme/app], events: [opened, synchronize]}
inputs:
  - {name: rules, type: string, default: "follow AGENTS.md"}
  - {name: depth, type: number, required: true}
blocks:
  - {id: task, kind: start_task, profile: reviewer, prompt: "Review {{trigger.pull_request.number}} ({{inputs.rules}}, depth {{inputs.depth}})"}
  - {id: idle, kind: wait_idle, task: task, timeout: 30m}
  - {id: diff, kind: read_file, task: task, path: /work/review.json}
  - id: gate
    kind: condition
    if: "{{steps.diff.output}}"
    then:
      - {id: post, kind: github_review, repo: "{{trigger.repo}}", number: "{{trigger.pull_request.number}}", text: "{{steps.diff.output}}"}
  - {id: end, kind: end_session, task: task}
settings: {concurrency_key: "{{trigger.repo}}#{{trigger.pull_request.number}}", policy: supersede}
`

func decode(t *testing.T, src string) Definition {
	t.Helper()
	d, err := DecodeDefinition([]byte(src))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return d
}

func TestValidateNamesEachProblemAndItsPlace(t *testing.T) {
	t.Parallel()
	if probs := Validate(decode(t, review), DefaultLimits()); len(probs) != 0 {
		t.Fatalf("the review automation: %v", probs)
	}
	for _, tt := range []struct {
		name, from, to string
		want           string // a problem's "path: message" holds it
	}{
		{"an unknown block", "kind: end_session", "kind: end_sesion", `blocks[4].kind: unknown block "end_sesion"`},
		{"a cycle: a block naming its own output", `if: "{{steps.diff.output}}"`, `if: "{{steps.gate.output}}"`,
			"blocks[3].if: {{steps.gate.output}} is this block's own output or a later one's: a cycle"},
		{"a block naming a later one", `path: /work/review.json`, `path: "{{steps.end.output}}"`, "blocks[2].path: {{steps.end.output}} is this block's own output"},
		{"an invalid cron", "trigger: {kind: github_pr, repos: [acme/app], events: [opened, synchronize]}", "trigger: {kind: schedule, cron: '61 * * * *'}",
			"trigger.cron: \"61 * * * *\": want five fields"},
		{"an unknown time zone", "trigger: {kind: github_pr, repos: [acme/app], events: [opened, synchronize]}", "trigger: {kind: schedule, cron: '0 9 * * 1', time_zone: Mars/Olympus}",
			"trigger.time_zone: \"Mars/Olympus\""},
		{"a template naming an unknown input", "{{inputs.rules}}", "{{inputs.rulez}}", "blocks[0].prompt: {{inputs.rulez}} names no input (inputs: depth, rules)"},
		{"a bad template", "{{inputs.rules}}", "{{input.rules}}", "want inputs.NAME, trigger.PATH or steps.ID.output"},
		{"a task that did not start", "task: task, path", "task: idle, path", `blocks[2].task: "idle" is not a start_task block that runs before this one`},
		{"a task started only in a branch", "{id: end, kind: end_session, task: task}", "{id: end, kind: end_session, task: post}", `blocks[4].task: "post" is not a start_task`},
		{"a branch's output after the condition", "{id: end, kind: end_session, task: task}", "{id: end, kind: post_slack, channel: c, text: '{{steps.post.output}}'}",
			"blocks[4].text: {{steps.post.output}} is in a branch or loop that may not have run before this block"},
		{"a block that does not exist", `if: "{{steps.diff.output}}"`, `if: "{{steps.nope.output}}"`, "blocks[3].if: {{steps.nope.output}} names no block"},
		{"a duplicate id", "{id: end, kind: end_session", "{id: diff, kind: end_session", `blocks[4].id: "diff" is also blocks[2]'s id`},
		{"a wait past the limit", "timeout: 30m", "timeout: 48h", `blocks[1].timeout: "48h": want a duration up to 24h0m0s`},
		{"a bad default", `default: "follow AGENTS.md"`, "default: [1]", "inputs[0].default: [1] is not a string"},
		{"a bad policy", "policy: supersede", "policy: race", `settings.policy: "race"`},
		{"a key naming a block", "concurrency_key: \"{{trigger.repo}}", "concurrency_key: \"{{steps.task.output}}", "settings.concurrency_key: {{steps.task.output}}"},
		{"a trigger value in a command", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'git checkout {{trigger.head_ref}}'}", "blocks[2].command: a command takes no {{…}}"},
		{"a step's output in a command", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'echo {{steps.idle.output}}'}", "blocks[2].command: a command takes no {{…}}"},
		{"an input in a command", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'echo {{ inputs.rules }}'}", "blocks[2].command: a command takes no {{…}}"},
		{"an env name that is not one", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'echo \"$X\"', env: {'A;B': x}}", `blocks[2].env.A;B: "A;B": want a name`},
		{"an env the shell owns", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'true', env: {IFS: '{{trigger.x}}'}}", `blocks[2].env.IFS: "IFS" is set by engrams or the shell`},
		{"env on another block", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: read_file, task: task, path: /x, env: {A: b}}", "blocks[2].env: only run_command takes env"},
		{"an env naming an unknown input", "{id: diff, kind: read_file, task: task, path: /work/review.json}",
			"{id: diff, kind: run_command, task: task, command: 'true', env: {A: '{{inputs.nope}}'}}", "blocks[2].env.A: {{inputs.nope}} names no input"},
		{"an unknown author floor", "events: [opened, synchronize]}", "events: [opened, synchronize], min_author: admin}", `trigger.min_author: "admin": want one of owner`},
		{"a negative cap", "policy: supersede}", "policy: supersede, max_per_hour: -5}", "settings.max_per_hour: -5"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(review, tt.from) {
				t.Fatalf("the fixture lacks %q", tt.from)
			}
			probs := Validate(decode(t, strings.Replace(review, tt.from, tt.to, 1)), DefaultLimits())
			var all []string
			for _, p := range probs {
				all = append(all, p.String())
				if strings.Contains(p.String(), tt.want) {
					return
				}
			}
			t.Errorf("problems %q, want one holding %q", all, tt.want)
		})
	}
}

func TestValidateBoundsTheTree(t *testing.T) {
	t.Parallel()
	lim := DefaultLimits()
	lim.MaxBlocks, lim.MaxDepth, lim.MaxLoop = 3, 2, 5
	d := decode(t, `
name: deep
trigger: {kind: manual}
blocks:
  - id: l1
    kind: loop
    max: 9
    body:
      - id: l2
        kind: loop
        max: 2
        body:
          - {id: c, kind: post_slack, channel: C1, text: hi}
          - {id: d, kind: post_slack, channel: C1, text: hi}
`)
	got := strings.Join(func() []string {
		var s []string
		for _, p := range Validate(d, lim) {
			s = append(s, p.String())
		}
		return s
	}(), "\n")
	if !strings.Contains(got, "blocks: 4 blocks, at most 3") {
		t.Errorf("problems:\n%s\nwant the block bound", got)
	}
	lim.MaxBlocks = 10
	got = ""
	for _, p := range Validate(d, lim) {
		got += p.String() + "\n"
	}
	for _, want := range []string{"blocks[0].max: 9: want 1 to 5 passes", "blocks[0].body[0].body: nested 3 deep, at most 2"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant %q", got, want)
		}
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{"name":"x","trigger":{"kind":"manual"},"blocks":[],"sttings":{}}`,
		"name: x\ntrigger: {kind: manual}\nblocks: [{id: a, kind: post_slack, chanel: C}]\n",
		"", "{}{}", "name: x\n---\nname: y\n", strings.Repeat(" ", MaxDefinitionBytes+1),
	} {
		if _, err := DecodeDefinition([]byte(src)); !errors.Is(err, ErrBadDefinition) {
			t.Errorf("decode %.40q: %v, want ErrBadDefinition", src, err)
		}
	}
}

func TestResolveInputs(t *testing.T) {
	t.Parallel()
	defs := decode(t, review).Inputs
	got, probs := ResolveInputs(defs, map[string]any{"depth": "3"})
	if len(probs) != 0 || got["depth"] != 3.0 || got["rules"] != "follow AGENTS.md" {
		t.Fatalf("resolve: %v %v", got, probs)
	}
	_, probs = ResolveInputs(defs, map[string]any{"rules": 7, "extra": true})
	want := "inputs.depth: required | inputs.extra: no such input | inputs.rules: 7 is not a string"
	var s []string
	for _, p := range probs {
		s = append(s, p.String())
	}
	if strings.Join(s, " | ") != want {
		t.Errorf("problems %q, want %q", strings.Join(s, " | "), want)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	out := Render("PR {{ trigger.number }} by {{trigger.user}}: {{steps.a.output}}{{inputs.none}}", map[string]string{
		"trigger.number": "42", "trigger.user": "ann", "steps.a.output": "ok"})
	if out != "PR 42 by ann: ok" {
		t.Errorf("render = %q", out)
	}
}

func TestTransition(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		from domain.RunState
		ev   RunEvent
		want domain.RunState
		ok   bool
	}{
		{domain.RunQueued, EventStart, domain.RunRunning, true},
		{domain.RunQueued, EventSkip, domain.RunSkipped, true},
		{domain.RunQueued, EventSupersede, domain.RunSuperseded, true},
		{domain.RunRunning, EventWait, domain.RunWaiting, true},
		{domain.RunWaiting, EventWake, domain.RunRunning, true},
		{domain.RunRunning, EventSucceed, domain.RunSucceeded, true},
		{domain.RunRunning, EventFail, domain.RunFailed, true},
		{domain.RunWaiting, EventFail, domain.RunFailed, true},
		{domain.RunRunning, EventCancel, domain.RunCancelled, true},
		{domain.RunWaiting, EventSupersede, domain.RunSuperseded, true},
		{domain.RunRunning, EventStart, domain.RunRunning, false},
		{domain.RunQueued, EventSucceed, domain.RunQueued, false},
		{domain.RunWaiting, EventSucceed, domain.RunWaiting, false},
		{domain.RunRunning, EventSkip, domain.RunRunning, false},
		{domain.RunSucceeded, EventFail, domain.RunSucceeded, false},
		{domain.RunCancelled, EventStart, domain.RunCancelled, false},
		{domain.RunSuperseded, EventWake, domain.RunSuperseded, false},
	} {
		got, err := Transition(tt.from, tt.ev)
		if got != tt.want || (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadTransition)) {
			t.Errorf("%s on %s = %s, %v; want %s (ok %v)", tt.ev, tt.from, got, err, tt.want, tt.ok)
		}
	}
	for _, s := range []domain.RunState{domain.RunSucceeded, domain.RunFailed, domain.RunCancelled, domain.RunSuperseded, domain.RunSkipped, domain.RunRefused} {
		if !s.Terminal() {
			t.Errorf("%s is not terminal", s)
		}
	}
	for _, s := range []domain.RunState{domain.RunQueued, domain.RunRunning, domain.RunWaiting} {
		if s.Terminal() {
			t.Errorf("%s is terminal", s)
		}
	}
}

// TestCommandEnvValid: values reach a command through env; a floor and
// caps in range are taken.
func TestCommandEnvValid(t *testing.T) {
	t.Parallel()
	d := decode(t, strings.NewReplacer("{id: diff, kind: read_file, task: task, path: /work/review.json}",
		"{id: diff, kind: run_command, task: task, command: 'git checkout \"$BRANCH\"', env: {BRANCH: '{{trigger.head_ref}}', N: '{{inputs.depth}}'}}",
		"events: [opened, synchronize]}", "events: [opened, synchronize], min_author: member}",
		"policy: supersede}", "policy: supersede, max_concurrent: 2, max_per_hour: -1}").Replace(review))
	if probs := Validate(d, DefaultLimits()); len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
	if c, h := d.Settings.Caps(); c != 2 || h != 0 {
		t.Fatalf("caps %d %d, want 2 and none", c, h)
	}
	if c, h := (Settings{}).Caps(); c != DefaultMaxConcurrent || h != DefaultMaxPerHour {
		t.Fatalf("default caps %d %d", c, h)
	}
}
