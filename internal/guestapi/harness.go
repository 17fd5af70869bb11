package guestapi

import (
	"encoding/json"
	"time"
)

// Harness routes, headers and outbox kinds (guest API v4).
const (
	PathHarness       = "/v1/harness"        // GET -> HarnessStatus
	PathHarnessEvents = "/v1/harness/events" // GET ?after=N -> NDJSON HarnessEvent lines, seq > N, in order; keeps
	// streaming new events until the client goes away (each line flushed).
	PathTunnel = "/v1/tunnel" // GET with "Connection: Upgrade", "Upgrade: engrams-tunnel": the
	// daemon holds the request until a process in the guest connects to
	// the gateway listener, then answers 101 Switching Protocols and the
	// stream carries that connection's bytes both ways (raw, unframed).

	// HeaderHarnessHead is on PathHarnessEvents answers: the daemon's last
	// event seq when the answer began. If after > head (the guest was
	// rolled back to an older snapshot), the daemon streams from head
	// (seq > head) and the reader must treat its cursor as head.
	HeaderHarnessHead = "Engrams-Harness-Head"

	// TunnelUpgrade is the Upgrade header value of PathTunnel.
	TunnelUpgrade = "engrams-tunnel"

	OutboxPrompt    = "harness.prompt"    // payload PromptPayload
	OutboxInterrupt = "harness.interrupt" // payload InterruptPayload
)

// HarnessStatus.State values.
const (
	HarnessNone   = "none"   // no bundle mounted
	HarnessReady  = "ready"  // descriptor valid, entrypoint executable
	HarnessFailed = "failed" // Error says why
)

// HarnessStatus answers PathHarness.
type HarnessStatus struct {
	State    string `json:"state"` // Harness*
	Name     string `json:"name,omitempty"`
	Version  string `json:"version,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Error    string `json:"error,omitempty"`   // why "failed"
	Gateway  string `json:"gateway,omitempty"` // the guest-local gateway base, e.g. "http://127.0.0.1:4780"
	Turn     string `json:"turn,omitempty"`    // the turn running now, "" when idle
	LastSeq  int64  `json:"last_seq"`
}

// PromptPayload is the payload of an OutboxPrompt entry.
type PromptPayload struct {
	Turn    string            `json:"turn"`              // unique per task; events name it
	Text    string            `json:"text"`              // the prompt
	Workdir string            `json:"workdir,omitempty"` // default: the daemon's WorkDir
	Model   string            `json:"model,omitempty"`   // default: the descriptor's first model
	Mode    string            `json:"mode,omitempty"`    // default: the descriptor's first mode
	Env     map[string]string `json:"env,omitempty"`     // extra env for the harness (non-secret)
	// Credentials maps a descriptor credential kind ("anthropic_api_key") to the session-scoped
	// placeholder the harness gets in that credential's Env variable. The real key never enters
	// the guest: the credential's BaseURLEnv points at the gateway.
	Credentials map[string]string `json:"credentials,omitempty"`
}

// InterruptPayload is the payload of an OutboxInterrupt entry.
type InterruptPayload struct {
	Turn string `json:"turn,omitempty"` // "" = whatever runs
}

// HarnessEvent is one line of PathHarnessEvents.
type HarnessEvent struct {
	Seq  int64           `json:"seq"`  // gap-free from 1 within one guest state (durable on the guest disk)
	Type string          `json:"type"` // Event*
	Turn string          `json:"turn,omitempty"`
	At   time.Time       `json:"at"`
	Data json.RawMessage `json:"data,omitempty"`
}

// HarnessEvent types; the Data of each is the *Data type named beside it.
const (
	EventRunStarted    = "run_started"    // RunStartedData
	EventAssistantText = "assistant_text" // AssistantTextData
	EventToolCall      = "tool_call"      // ToolCallData
	EventToolResult    = "tool_result"    // ToolResultData
	EventFileChanged   = "file_changed"   // FileChangedData
	EventUsage         = "usage"          // UsageData
	EventQuestion      = "question"       // QuestionData
	EventIdle          = "idle"           // IdleData: the end of a turn, success or not
	EventError         = "error"          // ErrorData, followed by idle
)

// ErrorData.Kind values.
const (
	ErrorAuth        = "auth"        // the model provider refused the credential
	ErrorModel       = "model"       // the model provider failed otherwise
	ErrorHarness     = "harness"     // the harness failed, stalled or is not ready
	ErrorInterrupted = "interrupted" // an interrupt, or the daemon stopped during the turn
	ErrorBadPrompt   = "bad_prompt"  // the prompt entry was refused
)

// FileChangedData.Change values.
const (
	ChangeCreate = "create"
	ChangeUpdate = "update"
	ChangeDelete = "delete"
)

// MaxToolOutput bounds ToolResultData.Output; longer output is cut with a note.
const MaxToolOutput = 16 << 10

// RunStartedData: a turn started.
type RunStartedData struct {
	Harness string `json:"harness"`
	Version string `json:"version"`
	Model   string `json:"model,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// Conversation is the harness's own conversation id (claude's
	// session_id, codex's thread_id); "" when the harness has none.
	Conversation string `json:"conversation,omitempty"`
}

// AssistantTextData is one completed assistant text block.
type AssistantTextData struct {
	Text string `json:"text"`
}

// ToolCallData: the agent called a tool.
type ToolCallData struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ToolResultData: a tool call's result (Output at most MaxToolOutput bytes).
type ToolResultData struct {
	ID      string `json:"id"`
	Output  string `json:"output"`
	IsError bool   `json:"is_error"`
}

// FileChangedData: the agent changed a file. Path is relative to the
// turn's workdir when inside it, else absolute.
type FileChangedData struct {
	Path   string `json:"path"`
	Change string `json:"change"` // Change*
}

// UsageData is one turn's usage of one model (a turn that used several
// has one usage event each). InputTokens counts every input token, cached
// ones included; CacheReadTokens and CacheWriteTokens are the parts of it
// read from and written to the provider's prompt cache. CostUSD is what the
// harness itself reckoned (0: it did not say); the coordinator prices the
// tokens with its own table when it knows the model.
type UsageData struct {
	Model            string  `json:"model,omitempty"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd"`
}

// QuestionData: the agent asks the user something.
type QuestionData struct {
	Text string `json:"text"`
}

// IdleData ends every turn.
type IdleData struct {
	Result     string `json:"result"` // the final text
	DurationMS int64  `json:"duration_ms"`
}

// ErrorData: the turn failed; an idle event follows.
type ErrorData struct {
	Kind    string `json:"kind"` // Error*
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"` // HTTP status, if any
}
