package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/guestapi"
)

// claudeNorm turns one turn's claude stream-json output (see
// modeltest/testdata/README.md) into harness events.
type claudeNorm struct {
	workdir string
	tools   map[string]string // tool_use id -> tool name
	session string            // session_id of the init line
	errored bool              // an error event was produced this turn
	auth    bool              // the provider refused the credential: stop the turn
	done    bool              // the result line came
	result  string
}

func newClaudeNorm(workdir string) *claudeNorm {
	return &claudeNorm{workdir: workdir, tools: map[string]string{}}
}

// claudeLine is the part of a claude output line the normalizer reads.
type claudeLine struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	Session string `json:"session_id"`
	Message struct {
		Model   string            `json:"model"`
		Content []json.RawMessage `json:"content"`
	} `json:"message"`
	// assistant (synthetic API error), system api_retry, result
	Error             string          `json:"error"`
	IsAPIErrorMessage bool            `json:"is_api_error_message"`
	APIErrorStatus    *int            `json:"api_error_status"`
	ErrorStatus       *int            `json:"error_status"`
	ToolUseResult     json.RawMessage `json:"tool_use_result"`
	// result
	IsError      bool     `json:"is_error"`
	Result       string   `json:"result"`
	TotalCostUSD *float64 `json:"total_cost_usd"`
	Usage        struct {
		InputTokens         int64 `json:"input_tokens"`
		CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadTokens     int64 `json:"cache_read_input_tokens"`
		OutputTokens        int64 `json:"output_tokens"`
	} `json:"usage"`
	SinceLast map[string]claudeModelUsage `json:"model_usage_since_last_result"`
}

// claudeModelUsage is one model's part of a turn (claude's modelUsage).
type claudeModelUsage struct {
	InputTokens         int64   `json:"inputTokens"`
	OutputTokens        int64   `json:"outputTokens"`
	CacheReadTokens     int64   `json:"cacheReadInputTokens"`
	CacheCreationTokens int64   `json:"cacheCreationInputTokens"`
	CostUSD             float64 `json:"costUSD"`
}

// claudeBlock is one content block of an assistant or user message.
type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// line normalizes one output line (events without Turn).
func (n *claudeNorm) line(b []byte) []pendingEvent {
	var l claudeLine
	if json.Unmarshal(b, &l) != nil {
		return nil
	}
	switch l.Type {
	case "system":
		return n.system(l)
	case "assistant":
		return n.assistant(l)
	case "user":
		return n.user(l)
	case "result":
		return n.resultLine(l)
	}
	return nil
}

func (n *claudeNorm) system(l claudeLine) []pendingEvent {
	switch l.Subtype {
	case "init":
		if l.Session != "" {
			n.session = l.Session
		}
	case "api_retry":
		status := deref(l.ErrorStatus)
		if status == 401 || status == 403 || l.Error == "authentication_failed" {
			n.auth = true
			return n.fail(guestapi.ErrorAuth, fmt.Sprintf("the model provider refused the credential (HTTP %d, %s)", status, l.Error), status)
		}
	}
	return nil
}

func (n *claudeNorm) assistant(l claudeLine) []pendingEvent {
	if l.IsAPIErrorMessage || l.Error != "" || l.Message.Model == "<synthetic>" {
		status := deref(l.APIErrorStatus)
		text := blocksText(l.Message.Content)
		if status == 401 || status == 403 || l.Error == "authentication_failed" {
			return n.fail(guestapi.ErrorAuth, text, status)
		}
		if l.IsAPIErrorMessage || l.Error != "" {
			return n.fail(guestapi.ErrorModel, text, status)
		}
	}
	var out []pendingEvent
	for _, raw := range l.Message.Content {
		var blk claudeBlock
		if json.Unmarshal(raw, &blk) != nil {
			continue
		}
		switch blk.Type {
		case "text":
			if blk.Text != "" {
				out = append(out, pendingEvent{Type: guestapi.EventAssistantText, Data: guestapi.AssistantTextData{Text: capText(blk.Text, maxTextEvent)}})
			}
		case "tool_use":
			n.tools[blk.ID] = blk.Name
			out = append(out, pendingEvent{Type: guestapi.EventToolCall, Data: guestapi.ToolCallData{ID: blk.ID, Name: blk.Name, Input: capInput(blk.Input)}})
			if q := askedQuestion(blk); q != "" {
				out = append(out, pendingEvent{Type: guestapi.EventQuestion, Data: guestapi.QuestionData{Text: q}})
			}
		}
	}
	return out
}

// askedQuestion is the text of an AskUserQuestion call ("" for other tools).
func askedQuestion(blk claudeBlock) string {
	if blk.Name != "AskUserQuestion" {
		return ""
	}
	var in struct {
		Questions []struct {
			Question string `json:"question"`
		} `json:"questions"`
		Question string `json:"question"`
	}
	_ = json.Unmarshal(blk.Input, &in)
	qs := []string{}
	if in.Question != "" {
		qs = append(qs, in.Question)
	}
	for _, q := range in.Questions {
		if q.Question != "" {
			qs = append(qs, q.Question)
		}
	}
	return strings.Join(qs, "\n")
}

func (n *claudeNorm) user(l claudeLine) []pendingEvent {
	var out []pendingEvent
	for i, raw := range l.Message.Content {
		var blk claudeBlock
		if json.Unmarshal(raw, &blk) != nil || blk.Type != "tool_result" {
			continue
		}
		out = append(out, pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: blk.ToolUseID, Output: capText(contentText(blk.Content), guestapi.MaxToolOutput), IsError: blk.IsError,
		}})
		if i == 0 && !blk.IsError {
			if fc, ok := n.fileChange(n.tools[blk.ToolUseID], l.ToolUseResult); ok {
				out = append(out, pendingEvent{Type: guestapi.EventFileChanged, Data: fc})
			}
		}
	}
	return out
}

// fileChange reads a tool's structured result: Write says create or
// update; Edit, MultiEdit and NotebookEdit update.
func (n *claudeNorm) fileChange(tool string, raw json.RawMessage) (guestapi.FileChangedData, bool) {
	var r struct {
		Type         string `json:"type"`
		FilePath     string `json:"filePath"`
		NotebookPath string `json:"notebook_path"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil {
		return guestapi.FileChangedData{}, false
	}
	p := r.FilePath
	if p == "" {
		p = r.NotebookPath
	}
	change := ""
	switch {
	case p == "":
	case r.Type == "create":
		change = guestapi.ChangeCreate
	case r.Type == "update" || tool == "Edit" || tool == "MultiEdit" || tool == "NotebookEdit" || tool == "Write":
		change = guestapi.ChangeUpdate
	}
	if change == "" {
		return guestapi.FileChangedData{}, false
	}
	return guestapi.FileChangedData{Path: relPath(n.workdir, p), Change: change}, true
}

func (n *claudeNorm) resultLine(l claudeLine) []pendingEvent {
	n.done, n.result = true, l.Result
	if l.Session != "" {
		n.session = l.Session
	}
	out := claudeUsage(l)
	if l.IsError && !n.errored {
		status := deref(l.APIErrorStatus)
		kind := guestapi.ErrorHarness
		switch {
		case status == 401 || status == 403:
			kind = guestapi.ErrorAuth
		case status != 0:
			kind = guestapi.ErrorModel
		}
		msg := l.Result
		if msg == "" {
			msg = "claude ended the turn with " + l.Subtype
		}
		out = append(out, n.fail(kind, msg, status)...)
	}
	return out
}

func (n *claudeNorm) fail(kind, msg string, status int) []pendingEvent {
	if n.errored {
		return nil
	}
	n.errored = true
	return []pendingEvent{{Type: guestapi.EventError, Data: guestapi.ErrorData{Kind: kind, Message: msg, Status: status}}}
}

// claudeRunner drives one long-lived claude process per conversation.
type claudeRunner struct {
	pc      procConfig
	home    string
	p       *hproc
	key     string // the launch parameters of p
	session string // the conversation (claude session_id)
}

func (r *claudeRunner) conversation() string { return r.session }

func (r *claudeRunner) close() {
	if r.p != nil {
		r.p.stop(r.pc.grace)
		r.p = nil
	}
}

// claudeArgs is the argv that starts claude for t: resuming the session
// when claude has it on disk, else starting it under that id.
func (r *claudeRunner) claudeArgs(t *turnRun) []string {
	mode := t.mode
	if mode == "" {
		mode = "acceptEdits"
	}
	argv := append(append([]string{}, t.argv...),
		"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--permission-mode", mode)
	if t.model != "" {
		argv = append(argv, "--model", t.model)
	}
	if r.session == "" {
		r.session = uuid.NewString()
	}
	if r.sessionSaved() {
		return append(argv, "--resume", r.session)
	}
	return append(argv, "--session-id", r.session)
}

// sessionSaved reports whether claude keeps the session under HOME.
func (r *claudeRunner) sessionSaved() bool {
	m, _ := filepath.Glob(filepath.Join(r.home, ".claude", "projects", "*", r.session+".jsonl"))
	return len(m) > 0
}

func (r *claudeRunner) launch(t *turnRun) error {
	key := fmt.Sprintf("%q %q %q %q", t.model, t.mode, t.workdir, t.env)
	if r.p != nil && !r.p.exited() && r.key == key {
		return nil
	}
	r.close()
	env := t.env
	if t.mode == "bypassPermissions" && os.Geteuid() == 0 {
		env = append(env, "IS_SANDBOX=1") // claude refuses to bypass permissions as root elsewhere
	}
	p, err := r.pc.startProc(procSpec{argv: r.claudeArgs(t), dir: t.workdir, env: env})
	if err != nil {
		return err
	}
	r.p, r.key = p, key
	return nil
}

func (r *claudeRunner) turn(ctx context.Context, t *turnRun) turnOutcome {
	if err := r.launch(t); err != nil {
		t.emit(t.started(r.session))
		return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: err.Error()}}
	}
	t.emit(t.started(r.session))
	msg, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": t.text}})
	if _, err := r.p.stdin.Write(append(msg, '\n')); err != nil {
		r.p.stop(0)
		return r.died(t, "write the prompt: "+err.Error())
	}
	n := newClaudeNorm(t.workdir)
	end := r.pc.pump(ctx, r.p, func(b []byte) bool {
		t.emit(n.line(b)...)
		return n.done || n.auth
	})
	if n.session != "" {
		r.session = n.session
	}
	switch {
	case end == pumpDone && n.auth && !n.done:
		r.close() // claude would retry a refused key for minutes; the next prompt resumes
		return turnOutcome{}
	case end == pumpDone:
		return turnOutcome{result: n.result}
	case end == pumpCancelled:
		r.close()
		return turnOutcome{cancelled: true}
	case end == pumpStalled:
		r.close()
		return turnOutcome{err: stallError(r.pc.stall)}
	}
	return r.died(t, r.p.exitText(r.pc.stderrPath))
}

// died reports a claude process that ended during a turn.
func (r *claudeRunner) died(t *turnRun, why string) turnOutcome {
	r.close()
	return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: "claude ended before the turn did: " + why}}
}

// claudeUsage is a result line's usage events: one per model the turn
// used (model_usage_since_last_result), else one of the line's usage with
// its total cost (older claude, whose total is the turn's in print mode).
func claudeUsage(l claudeLine) []pendingEvent {
	if len(l.SinceLast) == 0 {
		u := guestapi.UsageData{
			InputTokens:      l.Usage.InputTokens + l.Usage.CacheCreationTokens + l.Usage.CacheReadTokens,
			OutputTokens:     l.Usage.OutputTokens,
			CacheReadTokens:  l.Usage.CacheReadTokens,
			CacheWriteTokens: l.Usage.CacheCreationTokens,
		}
		if l.SinceLast == nil && l.TotalCostUSD != nil {
			u.CostUSD = *l.TotalCostUSD
		}
		return []pendingEvent{{Type: guestapi.EventUsage, Data: u}}
	}
	models := slices.Sorted(maps.Keys(l.SinceLast))
	out := make([]pendingEvent, 0, len(models))
	for _, name := range models {
		m := l.SinceLast[name]
		out = append(out, pendingEvent{Type: guestapi.EventUsage, Data: guestapi.UsageData{
			Model:            name,
			InputTokens:      m.InputTokens + m.CacheCreationTokens + m.CacheReadTokens,
			OutputTokens:     m.OutputTokens,
			CacheReadTokens:  m.CacheReadTokens,
			CacheWriteTokens: m.CacheCreationTokens,
			CostUSD:          m.CostUSD,
		}})
	}
	return out
}
