package modeltest

import (
	"encoding/json"
	"strings"
	"time"
)

// Turn is one scripted model answer. The server answers a model request with
// the first turn of the script whose When matches it and whose tool calls
// name only tools the request offers; a request no turn matches gets the
// Config's Fallback. Turns are not used up: a retried request gets the same
// answer again.
type Turn struct {
	// Name labels the turn in the request log (Request.Turn).
	Name string
	// When selects the requests this turn answers; nil matches every one.
	When Match
	// Text is the assistant text, streamed in a few deltas. It comes before
	// the tool calls in the answer.
	Text string
	// ToolCalls are the tools the model calls, in order.
	ToolCalls []ToolCall
	// StopReason overrides the Anthropic stop reason ("tool_use" when there
	// are tool calls, else "end_turn").
	StopReason string
	// Delay holds the answer back (before any byte is written), for tests of
	// interruption and time-outs.
	Delay time.Duration
	// Fail, when set, answers with this error instead of a message.
	Fail *APIError
	// Usage, when set, is the usage the answer reports; nil reckons it
	// from the sizes of the request and the answer.
	Usage *Usage
}

// Usage is the tokens an answer reports, in the Anthropic API's terms:
// Input leaves out the input read from (CacheRead) and written to
// (CacheWrite) the prompt cache. An OpenAI answer reports Input+CacheRead
// input tokens, CacheRead of them cached.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int
}

// usageOf is the usage an answer of t to rec reports.
func usageOf(rec *Request, t Turn) Usage {
	if t.Usage != nil {
		return *t.Usage
	}
	return Usage{Input: len(rec.Body)/4 + 1, Output: len(t.Text)/4 + 10*len(t.ToolCalls) + 1}
}

// ToolCall is one tool the model calls.
type ToolCall struct {
	// ID is the call id the model sends; empty generates one
	// ("toolu_…" for Anthropic, "call_…" for OpenAI).
	ID string
	// Name is the tool's name as the request's tools list names it.
	Name string
	// Input is the tool's input: any JSON value (usually a map) for an
	// Anthropic tool_use or an OpenAI function call. For an OpenAI custom
	// (freeform) tool such as codex's apply_patch a string is sent as is.
	Input any
}

// APIError is an error answer in the provider's own shape.
type APIError struct {
	// Status is the HTTP status (e.g. 401, 429, 529).
	Status int
	// Type is Anthropic's error.type (authentication_error,
	// overloaded_error, …) and OpenAI's error.type.
	Type string
	// Code is OpenAI's error.code (invalid_api_key, …); Anthropic has none.
	Code string
	// Message is the human-readable error message.
	Message string
}

// Match reports whether a turn answers a model request.
type Match func(r *Request) bool

// UserTextContains matches a request whose latest user input (everything
// after the last assistant message) contains s.
func UserTextContains(s string) Match {
	return func(r *Request) bool { return strings.Contains(r.LatestUserText(), s) }
}

// ToolResultFrom matches a request whose latest input carries the result of
// a call to the tool named name.
func ToolResultFrom(name string) Match {
	return func(r *Request) bool {
		for _, tr := range r.LatestToolResults() {
			if tr.Name == name {
				return true
			}
		}
		return false
	}
}

// ToolResultContains matches a request whose latest input carries a tool
// result whose text contains s.
func ToolResultContains(s string) Match {
	return func(r *Request) bool {
		for _, tr := range r.LatestToolResults() {
			if strings.Contains(tr.Content, s) {
				return true
			}
		}
		return false
	}
}

// OffersTool matches a request whose tools list names name.
func OffersTool(name string) Match {
	return func(r *Request) bool { return r.OffersTool(name) }
}

// All matches when every one of ms matches.
func All(ms ...Match) Match {
	return func(r *Request) bool {
		for _, m := range ms {
			if m != nil && !m(r) {
				return false
			}
		}
		return true
	}
}

// Message is one entry of a model request's conversation, normalized across
// the two APIs. A tool result is a user message with ToolResults.
type Message struct {
	// Role is user, assistant, system or developer.
	Role string
	// Text is the message's text blocks joined by newlines.
	Text string
	// ToolCalls are the assistant's tool calls (Input is the raw JSON, or
	// the raw text of an OpenAI custom tool call).
	ToolCalls []ToolCall
	// ToolResults are the results the client sends back.
	ToolResults []ToolResult
}

// ToolResult is a tool's result as the client sent it back.
type ToolResult struct {
	// CallID is the id of the call it answers.
	CallID string
	// Name is the called tool's name, found from the earlier call.
	Name string
	// Content is the result's text.
	Content string
	// IsError is Anthropic's is_error.
	IsError bool
}

// ToolSpec is one tool a request offers.
type ToolSpec struct {
	// Name is the tool's name.
	Name string
	// Type is the OpenAI tool type (function, custom, local_shell, …);
	// Anthropic tools are "custom" unless the request says otherwise.
	Type string
}

// Request is one recorded HTTP request. The fields after Body are filled for
// model calls (POST /v1/messages and POST /v1/responses).
type Request struct {
	// Seq numbers requests from 1 in arrival order.
	Seq int
	// Received is when the request's body had been read.
	Received time.Time
	// Method and Path are the request line's (Path without the query).
	Method, Path string
	// Query is the raw query string.
	Query string
	// Header is a copy of the request headers.
	Header map[string][]string
	// Body is the request body.
	Body []byte
	// APIKey is the key presented: x-api-key, else the Authorization
	// bearer token.
	APIKey string
	// Status is the HTTP status answered.
	Status int
	// Known is false for a request the server had no route for (answered
	// 404 and logged).
	Known bool
	// Turn names the script turn that answered ("fallback" when none matched);
	// empty for other requests.
	Turn string

	// Model is the request's model.
	Model string
	// Stream is whether the client asked for SSE.
	Stream bool
	// Tools are the tools the request offers.
	Tools []ToolSpec
	// Messages is the conversation sent (system prompt not included).
	Messages []Message
}

// IsModelCall reports whether the request is POST /v1/messages or
// POST /v1/responses (with or without the /v1 prefix).
func (r *Request) IsModelCall() bool {
	p := "/" + strings.TrimPrefix(strings.TrimPrefix(r.Path, "/"), "v1/")
	return r.Method == "POST" && (p == "/messages" || p == "/responses")
}

// Contains reports whether the request body contains s.
func (r *Request) Contains(s string) bool { return strings.Contains(string(r.Body), s) }

// OffersTool reports whether the request's tools list names name.
func (r *Request) OffersTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// ToolType is the type of the offered tool named name ("" when not offered).
func (r *Request) ToolType(name string) string {
	for _, t := range r.Tools {
		if t.Name == name {
			return t.Type
		}
	}
	return ""
}

// latest is the messages after the last assistant message.
func (r *Request) latest() []Message {
	i := len(r.Messages)
	for i > 0 && r.Messages[i-1].Role != "assistant" {
		i--
	}
	return r.Messages[i:]
}

// LatestUserText is the text of the user messages after the last assistant
// message, joined by newlines.
func (r *Request) LatestUserText() string {
	var parts []string
	for _, m := range r.latest() {
		if m.Role == "user" && m.Text != "" {
			parts = append(parts, m.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// LatestToolResults are the tool results after the last assistant message.
func (r *Request) LatestToolResults() []ToolResult {
	var out []ToolResult
	for _, m := range r.latest() {
		out = append(out, m.ToolResults...)
	}
	return out
}

// UserTexts are the texts of every user message sent, in order.
func (r *Request) UserTexts() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" && m.Text != "" {
			out = append(out, m.Text)
		}
	}
	return out
}

// nameToolResults fills each tool result's Name from the call it answers.
func nameToolResults(msgs []Message) {
	names := map[string]string{}
	for i := range msgs {
		for _, c := range msgs[i].ToolCalls {
			names[c.ID] = c.Name
		}
		for j := range msgs[i].ToolResults {
			if n, ok := names[msgs[i].ToolResults[j].CallID]; ok {
				msgs[i].ToolResults[j].Name = n
			}
		}
	}
}

// jsonText is a JSON value that is either a string or a list of blocks with
// a "text" field; it collects the text.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}
