package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// codexNorm turns one `codex exec --json` run's output (see
// modeltest/testdata/README.md) into harness events.
type codexNorm struct {
	workdir string
	model   string          // the turn's model, "" when codex picks (its usage does not say)
	thread  string          // thread.started's thread_id
	called  map[string]bool // item ids whose tool_call was produced
	errored bool
	done    bool // turn.completed or turn.failed came
	result  string
}

func newCodexNorm(workdir string) *codexNorm {
	return &codexNorm{workdir: workdir, called: map[string]bool{}}
}

type codexLine struct {
	Type     string    `json:"type"`
	ThreadID string    `json:"thread_id"`
	Message  string    `json:"message"`
	Item     codexItem `json:"item"`
	Error    struct {
		Message string `json:"message"`
	} `json:"error"`
	Usage struct {
		InputTokens       int64 `json:"input_tokens"` // cached ones included
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Query            string          `json:"query"`
	Message          string          `json:"message"`
}

type codexChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // add, update, delete
}

// line normalizes one output line (events without Turn).
func (n *codexNorm) line(b []byte) []pendingEvent {
	var l codexLine
	if json.Unmarshal(b, &l) != nil {
		return nil
	}
	switch l.Type {
	case "thread.started":
		n.thread = l.ThreadID
	case "item.started":
		return n.call(l.Item)
	case "item.completed":
		return n.completed(l.Item)
	case "turn.completed":
		n.done = true
		return []pendingEvent{{Type: guestapi.EventUsage, Data: guestapi.UsageData{Model: n.model,
			InputTokens: l.Usage.InputTokens, OutputTokens: l.Usage.OutputTokens, CacheReadTokens: l.Usage.CachedInputTokens}}}
	case "error":
		if kind, status := codexErrorKind(l.Message); kind == guestapi.ErrorAuth {
			return n.fail(kind, l.Message, status)
		}
	case "turn.failed":
		n.done = true
		kind, status := codexErrorKind(l.Error.Message)
		return n.fail(kind, l.Error.Message, status)
	}
	return nil
}

var codexStatusRE = regexp.MustCompile(`\bstatus (\d{3})\b`)

// codexErrorKind classifies an error message ("unexpected status 401
// Unauthorized: …").
func codexErrorKind(msg string) (string, int) {
	status := 0
	if m := codexStatusRE.FindStringSubmatch(msg); m != nil {
		status, _ = strconv.Atoi(m[1])
	}
	if status == 401 || status == 403 || strings.Contains(msg, "Unauthorized") || strings.Contains(msg, "invalid_api_key") {
		return guestapi.ErrorAuth, status
	}
	return guestapi.ErrorModel, status
}

// call is the tool_call of an item that runs something.
func (n *codexNorm) call(it codexItem) []pendingEvent {
	var name string
	var input any
	switch it.Type {
	case "command_execution":
		name, input = "shell", map[string]string{"command": it.Command}
	case "file_change":
		name, input = "apply_patch", map[string]json.RawMessage{"changes": it.Changes}
	case "mcp_tool_call":
		name, input = it.Server+"."+it.Tool, it.Arguments
	case "web_search":
		name, input = "web_search", map[string]string{"query": it.Query}
	default:
		return nil
	}
	if n.called[it.ID] {
		return nil
	}
	n.called[it.ID] = true
	raw, _ := json.Marshal(input)
	return []pendingEvent{{Type: guestapi.EventToolCall, Data: guestapi.ToolCallData{ID: it.ID, Name: name, Input: capInput(raw)}}}
}

func (n *codexNorm) completed(it codexItem) []pendingEvent {
	switch it.Type {
	case "agent_message":
		n.result = it.Text
		return []pendingEvent{{Type: guestapi.EventAssistantText, Data: guestapi.AssistantTextData{Text: capText(it.Text, maxTextEvent)}}}
	case "command_execution":
		failed := it.Status == "failed" || (it.ExitCode != nil && *it.ExitCode != 0)
		return append(n.call(it), pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: it.ID, Output: capText(it.AggregatedOutput, guestapi.MaxToolOutput), IsError: failed,
		}})
	case "file_change":
		return n.fileChanges(it)
	case "mcp_tool_call":
		return append(n.call(it), pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: it.ID, Output: capText(contentText(it.Result), guestapi.MaxToolOutput), IsError: it.Status == "failed",
		}})
	case "web_search":
		return n.call(it)
	}
	return nil
}

func (n *codexNorm) fileChanges(it codexItem) []pendingEvent {
	var changes []codexChange
	_ = json.Unmarshal(it.Changes, &changes)
	ok := it.Status == "" || it.Status == "completed"
	var lines []string
	var files []pendingEvent
	for _, c := range changes {
		change := map[string]string{"add": guestapi.ChangeCreate, "update": guestapi.ChangeUpdate, "delete": guestapi.ChangeDelete}[c.Kind]
		if change == "" {
			change = guestapi.ChangeUpdate
		}
		p := relPath(n.workdir, c.Path)
		lines = append(lines, change+" "+p)
		if ok {
			files = append(files, pendingEvent{Type: guestapi.EventFileChanged, Data: guestapi.FileChangedData{Path: p, Change: change}})
		}
	}
	out := append(n.call(it), pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
		ID: it.ID, Output: capText(strings.Join(lines, "\n"), guestapi.MaxToolOutput), IsError: !ok,
	}})
	return append(out, files...)
}

func (n *codexNorm) fail(kind, msg string, status int) []pendingEvent {
	if n.errored {
		return nil
	}
	n.errored = true
	return []pendingEvent{{Type: guestapi.EventError, Data: guestapi.ErrorData{Kind: kind, Message: msg, Status: status}}}
}

// codexRunner runs one codex process per turn, resuming the thread after
// the first.
type codexRunner struct {
	pc     procConfig
	home   string
	thread string
}

func (r *codexRunner) conversation() string { return r.thread }
func (r *codexRunner) close()               {}

// codexArgs is the argv of one turn; the prompt comes on stdin ("-").
func (r *codexRunner) codexArgs(t *turnRun) []string {
	argv := append([]string{}, t.argv...)
	if r.thread == "" {
		return append(argv, "exec", "--json", "--skip-git-repo-check", "-")
	}
	return append(argv, "exec", "resume", "--json", "--skip-git-repo-check", r.thread, "-")
}

func (r *codexRunner) turn(ctx context.Context, t *turnRun) turnOutcome {
	codexHome := filepath.Join(r.home, ".codex")
	if err := writeCodexConfig(codexHome, t); err != nil {
		t.emit(t.started(r.thread))
		return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: err.Error()}}
	}
	env := append(append([]string{}, t.env...), "CODEX_HOME="+codexHome)
	p, err := r.pc.startProc(procSpec{argv: r.codexArgs(t), dir: t.workdir, env: env, stdin: []byte(t.text)})
	if err != nil {
		t.emit(t.started(r.thread))
		return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: err.Error()}}
	}
	defer p.stop(r.pc.grace)
	n := newCodexNorm(t.workdir)
	if t.model != guestapi.AnyModel {
		n.model = t.model
	}
	announced := false
	announce := func() {
		if !announced {
			announced = true
			if n.thread != "" {
				r.thread = n.thread
			}
			t.emit(t.started(r.thread))
		}
	}
	end := r.pc.pump(ctx, p, func(b []byte) bool {
		evs := n.line(b)
		if n.thread != "" || len(evs) > 0 {
			announce()
		}
		t.emit(evs...)
		return false // read until the process ends
	})
	announce()
	switch end {
	case pumpCancelled:
		return turnOutcome{cancelled: true}
	case pumpStalled:
		return turnOutcome{err: stallError(r.pc.stall)}
	}
	if n.done || n.errored {
		return turnOutcome{result: n.result}
	}
	<-p.done
	return turnOutcome{result: n.result, err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness,
		Message: "codex ended before the turn did: " + p.exitText(r.pc.stderrPath)}}
}

// writeCodexConfig writes $CODEX_HOME/config.toml: the turn's model and
// sandbox mode, no approvals, nothing that reaches outside hosts, and the
// model provider at the gateway URL of the descriptor's first credential.
func writeCodexConfig(codexHome string, t *turnRun) error {
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return fmt.Errorf("create codex home: %w", err)
	}
	var b strings.Builder
	if t.model != "" && t.model != guestapi.AnyModel {
		fmt.Fprintf(&b, "model = %q\n", t.model)
	}
	var cred *guestapi.HarnessCredential
	if len(t.desc.Credentials) > 0 && t.gateway != "" {
		cred = &t.desc.Credentials[0]
		b.WriteString("model_provider = \"engrams\"\n")
	}
	b.WriteString("approval_policy = \"never\"\n")
	if t.mode != "" {
		fmt.Fprintf(&b, "sandbox_mode = %q\n", t.mode)
	}
	b.WriteString(`check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

# The plugin sync and apps reach outside hosts at every start. The shell
# snapshot runs a login shell and a dozen small programs at every start
# (seconds under software emulation); the adapter sets the environment.
[features]
plugins = false
remote_plugin = false
apps = false
shell_snapshot = false
`)
	if cred != nil {
		fmt.Fprintf(&b, `
[model_providers.engrams]
name = "engrams"
base_url = %q
env_key = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, t.gateway+"/"+cred.Kind, cred.Env)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	return nil
}
