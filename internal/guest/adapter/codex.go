package adapter

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// Bounds of one turn's normalization.
const (
	// maxCalled bounds the item ids a turn remembers having announced;
	// past it the set starts over (a repeated tool_call is the worst
	// outcome).
	maxCalled = 4096
	// maxFileChanges bounds the files one fileChange item reports.
	maxFileChanges = 1024
)

// codexNorm turns the notifications of one codex app-server turn into
// harness events: the same events codex exec --json gave (see
// modeltest/testdata/README.md), from the app-server's camelCase items.
type codexNorm struct {
	workdir string
	model   string          // the turn's model ("" when unknown)
	turn    string          // the turn's id: notifications of other turns are dropped
	called  map[string]bool // item ids whose tool_call was produced
	usage   guestapi.UsageData
	counted bool // a token usage update of the turn came
	errored bool
	done    bool   // turn/completed came
	status  string // its status: completed, interrupted, failed
	result  string
}

func newCodexNorm(workdir, model string) *codexNorm {
	return &codexNorm{workdir: workdir, model: model, called: map[string]bool{}}
}

// codexParams is the part of a notification's params the normalizer reads.
type codexParams struct {
	TurnID string    `json:"turnId"`
	Item   codexItem `json:"item"`
	Turn   struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Error  *codexTurnError `json:"error"`
	} `json:"turn"`
	Error      codexTurnError `json:"error"`
	TokenUsage struct {
		Last struct {
			InputTokens       int64 `json:"inputTokens"` // cached ones included
			CachedInputTokens int64 `json:"cachedInputTokens"`
			OutputTokens      int64 `json:"outputTokens"`
		} `json:"last"`
	} `json:"tokenUsage"`
}

type codexTurnError struct {
	Message   string          `json:"message"`
	ErrorInfo json.RawMessage `json:"codexErrorInfo"`
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	AggregatedOutput *string         `json:"aggregatedOutput"`
	ExitCode         *int            `json:"exitCode"`
	Status           string          `json:"status"`
	Changes          json.RawMessage `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           json.RawMessage `json:"result"`
	Error            *struct {
		Message string `json:"message"`
	} `json:"error"`
	Query string `json:"query"`
}

// codexChange is one file of a fileChange item, as codex exec named it.
type codexChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // add, update, delete
}

// note normalizes one notification (events without Turn).
func (n *codexNorm) note(m rpcMessage) []pendingEvent {
	var p codexParams
	if json.Unmarshal(m.Params, &p) != nil {
		return nil
	}
	if m.Method == "turn/started" && n.turn == "" {
		n.turn = p.Turn.ID
	}
	if n.turn == "" || (p.TurnID != n.turn && p.Turn.ID != n.turn) {
		return nil // another turn's, or before the turn's id is known
	}
	switch m.Method {
	case "item/started":
		return n.call(p.Item)
	case "item/completed":
		return n.completed(p.Item)
	case "thread/tokenUsage/updated":
		u := p.TokenUsage.Last
		n.counted = true
		n.usage.InputTokens += u.InputTokens
		n.usage.OutputTokens += u.OutputTokens
		n.usage.CacheReadTokens += u.CachedInputTokens
	case "error":
		if kind, status := codexErrorKind(p.Error); kind == guestapi.ErrorAuth {
			return n.fail(kind, p.Error.Message, status)
		}
	case "turn/completed":
		return n.completedTurn(p)
	}
	return nil
}

func (n *codexNorm) completedTurn(p codexParams) []pendingEvent {
	if p.Turn.ID != n.turn || n.done {
		return nil
	}
	n.done, n.status = true, p.Turn.Status
	var out []pendingEvent
	if n.counted || n.status == "completed" {
		u := n.usage
		u.Model = n.model
		out = append(out, pendingEvent{Type: guestapi.EventUsage, Data: u})
	}
	if n.status == "failed" {
		e := codexTurnError{Message: "codex failed the turn"}
		if p.Turn.Error != nil {
			e = *p.Turn.Error
		}
		kind, status := codexErrorKind(e)
		out = append(out, n.fail(kind, e.Message, status)...)
	}
	return out
}

var codexStatusRE = regexp.MustCompile(`\bstatus (\d{3})\b`)

// codexErrorKind classifies a turn error by its codexErrorInfo (an HTTP
// status, "unauthorized") or its message ("unexpected status 401
// Unauthorized: …").
func codexErrorKind(e codexTurnError) (string, int) {
	var info struct {
		Status *int `json:"httpStatusCode"`
	}
	var variants map[string]json.RawMessage
	var name string
	status := 0
	if json.Unmarshal(e.ErrorInfo, &variants) == nil {
		for _, v := range variants {
			if json.Unmarshal(v, &info) == nil && info.Status != nil {
				status = *info.Status
			}
		}
	} else {
		_ = json.Unmarshal(e.ErrorInfo, &name)
	}
	if m := codexStatusRE.FindStringSubmatch(e.Message); m != nil && status == 0 {
		status, _ = strconv.Atoi(m[1])
	}
	if status == 401 || status == 403 || name == "unauthorized" ||
		strings.Contains(e.Message, "Unauthorized") || strings.Contains(e.Message, "invalid_api_key") {
		return guestapi.ErrorAuth, status
	}
	return guestapi.ErrorModel, status
}

// call is the tool_call of an item that runs something.
func (n *codexNorm) call(it codexItem) []pendingEvent {
	var name string
	var input any
	switch it.Type {
	case "commandExecution":
		name, input = "shell", map[string]string{"command": it.Command}
	case "fileChange":
		name, input = "apply_patch", map[string][]codexChange{"changes": codexChanges(it.Changes)}
	case "mcpToolCall":
		name, input = it.Server+"."+it.Tool, it.Arguments
	case "webSearch":
		name, input = "web_search", map[string]string{"query": it.Query}
	default:
		return nil
	}
	if n.called[it.ID] {
		return nil
	}
	if len(n.called) >= maxCalled {
		clear(n.called)
	}
	n.called[it.ID] = true
	raw, err := json.Marshal(input)
	if err != nil || len(raw) == 0 {
		raw = []byte("null")
	}
	return []pendingEvent{{Type: guestapi.EventToolCall, Data: guestapi.ToolCallData{ID: it.ID, Name: name, Input: capInput(raw)}}}
}

func (n *codexNorm) completed(it codexItem) []pendingEvent {
	switch it.Type {
	case "agentMessage":
		n.result = it.Text
		return []pendingEvent{{Type: guestapi.EventAssistantText, Data: guestapi.AssistantTextData{Text: capText(it.Text, maxTextEvent)}}}
	case "commandExecution":
		failed := it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
		out := ""
		if it.AggregatedOutput != nil {
			out = *it.AggregatedOutput
		}
		return append(n.call(it), pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: it.ID, Output: capText(out, guestapi.MaxToolOutput), IsError: failed,
		}})
	case "fileChange":
		return n.fileChanges(it)
	case "mcpToolCall":
		text := contentText(it.Result)
		if it.Error != nil && it.Error.Message != "" {
			text = it.Error.Message
		}
		return append(n.call(it), pendingEvent{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: it.ID, Output: capText(text, guestapi.MaxToolOutput), IsError: it.Status == "failed",
		}})
	case "webSearch":
		return n.call(it)
	}
	return nil
}

// codexChanges reads a fileChange item's changes ([{path, kind: {type}}]).
func codexChanges(raw json.RawMessage) []codexChange {
	var in []struct {
		Path string `json:"path"`
		Kind struct {
			Type string `json:"type"`
		} `json:"kind"`
	}
	_ = json.Unmarshal(raw, &in)
	in = in[:min(len(in), maxFileChanges)]
	out := make([]codexChange, 0, len(in))
	for _, c := range in {
		out = append(out, codexChange{Path: c.Path, Kind: c.Kind.Type})
	}
	return out
}

func (n *codexNorm) fileChanges(it codexItem) []pendingEvent {
	ok := it.Status == "" || it.Status == "completed"
	var lines []string
	var files []pendingEvent
	for _, c := range codexChanges(it.Changes) {
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
	return []pendingEvent{{Type: guestapi.EventError, Data: guestapi.ErrorData{Kind: kind, Message: capText(msg, maxTextEvent), Status: status}}}
}
