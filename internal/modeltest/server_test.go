package modeltest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/modeltest"
)

type sseEvent struct {
	name string
	data map[string]any
}

// post sends body to the server and returns the response.
func post(t *testing.T, url, path string, header map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readSSE parses an event stream, checking each event's data type matches
// its event name.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event %s: bad data: %v", name, err)
			}
			if d["type"] != name {
				t.Errorf("event %s carries type %v", name, d["type"])
			}
			out = append(out, sseEvent{name: name, data: d})
		}
	}
	return out
}

func names(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

const anthropicHeaders = `{"model":"claude-x","stream":%s,"max_tokens":100,"tools":[{"name":"Write","input_schema":{}}],"messages":[{"role":"user","content":[{"type":"text","text":"please create hello.txt"}]}]}`

func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	srv := modeltest.Start(t, modeltest.Config{APIKey: "k", Script: []modeltest.Turn{{
		When:      modeltest.UserTextContains("create hello.txt"),
		Text:      "Writing it.",
		ToolCalls: []modeltest.ToolCall{{ID: "toolu_1", Name: "Write", Input: map[string]any{"file_path": "/r/hello.txt", "content": "hi"}}},
	}}})
	resp := post(t, srv.URL(), "/v1/messages", map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"},
		strings.Replace(anthropicHeaders, "%s", "true", 1))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := readSSE(t, resp.Body)
	want := []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if got := names(evs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	var text, input string
	for _, e := range evs {
		if d, ok := e.data["delta"].(map[string]any); ok && e.name == "content_block_delta" {
			switch d["type"] {
			case "text_delta":
				text += d["text"].(string)
			case "input_json_delta":
				input += d["partial_json"].(string)
			}
		}
	}
	if text != "Writing it." {
		t.Errorf("text = %q", text)
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(input), &in); err != nil || in["content"] != "hi" {
		t.Errorf("tool input %q: %v", input, err)
	}
	start := evs[7].data["content_block"].(map[string]any)
	if start["type"] != "tool_use" || start["id"] != "toolu_1" || start["name"] != "Write" {
		t.Errorf("tool_use block start = %v", start)
	}
	md := evs[len(evs)-2].data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] == nil {
		t.Errorf("message_delta = %v", md)
	}
}

func TestAnthropicNonStreaming(t *testing.T) {
	t.Parallel()
	srv := modeltest.Start(t, modeltest.Config{Script: []modeltest.Turn{{Text: "plain"}}})
	resp := post(t, srv.URL(), "/v1/messages", map[string]string{"x-api-key": "any"}, strings.Replace(anthropicHeaders, "%s", "false", 1))
	var msg struct {
		Type       string `json:"type"`
		Role       string `json:"role"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Text string
		} `json:"content"`
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.StopReason != "end_turn" ||
		len(msg.Content) != 1 || msg.Content[0].Text != "plain" || msg.Usage.InputTokens == 0 {
		t.Errorf("message = %+v", msg)
	}
}

func TestOpenAIStream(t *testing.T) {
	t.Parallel()
	srv := modeltest.Start(t, modeltest.Config{APIKey: "k", Script: []modeltest.Turn{{
		Text: "Patching.",
		ToolCalls: []modeltest.ToolCall{
			{ID: "call_1", Name: "apply_patch", Input: "*** Begin Patch\n*** End Patch\n"},
			{ID: "call_2", Name: "exec_command", Input: map[string]any{"cmd": "ls"}},
		},
	}}})
	body := `{"model":"gpt-x","stream":true,"tools":[{"type":"custom","name":"apply_patch"},{"type":"function","name":"exec_command"}],` +
		`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`
	resp := post(t, srv.URL(), "/v1/responses", map[string]string{"Authorization": "Bearer k"}, body)
	evs := readSSE(t, resp.Body)
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.delta",
		"response.custom_tool_call_input.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if got := names(evs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	for i, e := range evs {
		if int(e.data["sequence_number"].(float64)) != i {
			t.Errorf("event %d has sequence_number %v", i, e.data["sequence_number"])
		}
	}
	custom := evs[15].data["item"].(map[string]any)
	if custom["type"] != "custom_tool_call" || custom["call_id"] != "call_1" || custom["input"] != "*** Begin Patch\n*** End Patch\n" {
		t.Errorf("custom tool call item = %v", custom)
	}
	fn := evs[21].data["item"].(map[string]any)
	if fn["type"] != "function_call" || fn["call_id"] != "call_2" || fn["arguments"] != `{"cmd":"ls"}` {
		t.Errorf("function call item = %v", fn)
	}
	done := evs[len(evs)-1].data["response"].(map[string]any)
	usage, _ := done["usage"].(map[string]any)
	if done["status"] != "completed" || len(done["output"].([]any)) != 3 || usage["total_tokens"] == nil {
		t.Errorf("response.completed = %v", done)
	}
}

func TestWrongKeyErrorShapes(t *testing.T) {
	t.Parallel()
	srv := modeltest.Start(t, modeltest.Config{APIKey: "right", XShouldRetry: "false"})
	tests := []struct {
		name, path string
		header     map[string]string
		want       string
	}{
		{"anthropic x-api-key", "/v1/messages", map[string]string{"x-api-key": "wrong"}, `{"error":{"message":"invalid x-api-key","type":"authentication_error"},"request_id":"`},
		{"anthropic bearer", "/v1/messages", map[string]string{"Authorization": "Bearer wrong", "anthropic-version": "2023-06-01"}, `"type":"authentication_error"`},
		{"openai", "/v1/responses", map[string]string{"Authorization": "Bearer wrong"}, `{"error":{"code":"invalid_api_key","message":"Incorrect API key provided.`},
		{"openai no key", "/v1/responses", nil, `"type":"invalid_request_error"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp := post(t, srv.URL(), tt.path, tt.header, `{}`)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), tt.want) {
				t.Errorf("status %d body %s, want 401 with %s", resp.StatusCode, b, tt.want)
			}
			if resp.Header.Get("x-should-retry") != "false" {
				t.Errorf("x-should-retry = %q", resp.Header.Get("x-should-retry"))
			}
		})
	}
}

func TestScriptMatching(t *testing.T) {
	t.Parallel()
	script := []modeltest.Turn{
		{Name: "write", When: modeltest.UserTextContains("create"), ToolCalls: []modeltest.ToolCall{{Name: "Write", Input: map[string]any{}}}},
		{Name: "after-write", When: modeltest.ToolResultFrom("Write"), Text: "done"},
		{Name: "result-text", When: modeltest.ToolResultContains("magic"), Text: "magic seen"},
	}
	tests := []struct {
		name, body, turn string
	}{
		{"prompt with the tool offered", `{"tools":[{"name":"Write"}],"messages":[{"role":"user","content":"create x"}]}`, "write"},
		{"prompt without the tool", `{"messages":[{"role":"user","content":"create x"}]}`, "fallback"},
		{"tool result", `{"tools":[{"name":"Write"}],"messages":[{"role":"user","content":"create x"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Write","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`, "after-write"},
		{"result text", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"a magic word"}]}]}]}`, "result-text"},
		{"openai function output", `{"tools":[{"type":"function","name":"Write"}],"input":[{"role":"user","content":"create x"},` +
			`{"type":"function_call","call_id":"c1","name":"Write","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}]}`, "after-write"},
		{"openai string input", `{"tools":[{"type":"function","name":"Write"}],"input":"create it"}`, "write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.Start(t, modeltest.Config{Script: script})
			path := "/v1/messages"
			if strings.HasPrefix(tt.name, "openai") {
				path = "/v1/responses"
			}
			resp := post(t, srv.URL(), path, nil, tt.body)
			_, _ = io.Copy(io.Discard, resp.Body)
			reqs := srv.ModelRequests()
			if resp.StatusCode != 200 || len(reqs) != 1 {
				t.Fatalf("status %d, %d requests", resp.StatusCode, len(reqs))
			}
			if reqs[0].Turn != tt.turn {
				t.Errorf("turn %q, want %q", reqs[0].Turn, tt.turn)
			}
		})
	}
}

func TestUnknownRouteRecorded(t *testing.T) {
	t.Parallel()
	srv := modeltest.Start(t, modeltest.Config{})
	resp := post(t, srv.URL(), "/v1/embeddings", map[string]string{"Authorization": "Bearer x"}, `{}`)
	b, _ := io.ReadAll(resp.Body)
	u := srv.Unknown()
	if resp.StatusCode != 404 || len(u) != 1 || u[0].Path != "/v1/embeddings" || !strings.Contains(string(b), `"error"`) {
		t.Errorf("status %d body %s unknown %d", resp.StatusCode, b, len(u))
	}
	for _, p := range []string{"/v1/models", "/models"} {
		r, err := http.Get(srv.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, r.StatusCode)
		}
	}
}

// TestScriptedUsage: a turn's usage is reported as scripted, in each
// provider's terms (OpenAI's input counts the cached tokens).
func TestScriptedUsage(t *testing.T) {
	t.Parallel()
	u := &modeltest.Usage{Input: 1000, Output: 50, CacheRead: 4000, CacheWrite: 500}
	srv := modeltest.Start(t, modeltest.Config{Script: []modeltest.Turn{{Text: "plain", Usage: u}}})
	var msg struct {
		Usage map[string]any `json:"usage"`
	}
	resp := post(t, srv.URL(), "/v1/messages", map[string]string{"x-api-key": "any"}, strings.Replace(anthropicHeaders, "%s", "false", 1))
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if m := msg.Usage; m["input_tokens"] != 1000.0 || m["output_tokens"] != 50.0 || m["cache_read_input_tokens"] != 4000.0 || m["cache_creation_input_tokens"] != 500.0 {
		t.Errorf("anthropic usage %v", m)
	}
	evs := readSSE(t, post(t, srv.URL(), "/v1/messages", map[string]string{"x-api-key": "any"}, strings.Replace(anthropicHeaders, "%s", "true", 1)).Body)
	start := evs[0].data["message"].(map[string]any)["usage"].(map[string]any)
	delta := evs[len(evs)-2].data["usage"].(map[string]any)
	if start["input_tokens"] != 1000.0 || start["cache_read_input_tokens"] != 4000.0 || delta["output_tokens"] != 50.0 {
		t.Errorf("anthropic stream usage: start %v, delta %v", start, delta)
	}
	resp = post(t, srv.URL(), "/v1/responses", map[string]string{"Authorization": "Bearer any"}, `{"model":"gpt-5","input":"hi"}`)
	var r struct {
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			InputDetails struct {
				Cached int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Usage.InputTokens != 5000 || r.Usage.InputDetails.Cached != 4000 || r.Usage.OutputTokens != 50 {
		t.Errorf("openai usage %+v", r.Usage)
	}
}
