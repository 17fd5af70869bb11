package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// openAIRequest is the part of a Responses API request the server reads.
type openAIRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  json.RawMessage `json:"input"`
	Tools  []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

type openAIItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	Action    json.RawMessage `json:"action"`
}

// parseOpenAI fills rec's model-call fields from a Responses request.
func parseOpenAI(rec *Request) error {
	var req openAIRequest
	if err := json.Unmarshal(rec.Body, &req); err != nil {
		return fmt.Errorf("decode responses request: %w", err)
	}
	rec.Model, rec.Stream = req.Model, req.Stream
	for _, t := range req.Tools {
		name := t.Name
		if name == "" {
			name = t.Type // local_shell, web_search, … have no name
		}
		rec.Tools = append(rec.Tools, ToolSpec{Name: name, Type: t.Type})
	}
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		rec.Messages = []Message{{Role: "user", Text: s}}
		return nil
	}
	var items []openAIItem
	if len(req.Input) > 0 {
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return fmt.Errorf("decode responses input: %w", err)
		}
	}
	for _, it := range items {
		switch it.Type {
		case "", "message":
			rec.Messages = append(rec.Messages, Message{Role: it.Role, Text: jsonText(it.Content)})
		case "function_call":
			rec.Messages = append(rec.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{{ID: it.CallID, Name: it.Name, Input: json.RawMessage(it.Arguments)}}})
		case "custom_tool_call":
			rec.Messages = append(rec.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{{ID: it.CallID, Name: it.Name, Input: it.Input}}})
		case "local_shell_call":
			rec.Messages = append(rec.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{{ID: it.CallID, Name: "local_shell", Input: it.Action}}})
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			rec.Messages = append(rec.Messages, Message{Role: "user", ToolResults: []ToolResult{{CallID: it.CallID, Content: jsonText(it.Output)}}})
		}
	}
	nameToolResults(rec.Messages)
	return nil
}

func (s *Server) openAIResponses(ctx context.Context, w http.ResponseWriter, rec *Request) {
	if err := parseOpenAI(rec); err != nil {
		writeOpenAIError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := s.pick(rec)
	wait(ctx, turn.Delay)
	if turn.Fail != nil {
		writeOpenAIError(w, turn.Fail)
		return
	}
	items, err := s.openAIOutput(rec, turn)
	if err != nil {
		writeOpenAIError(w, &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()})
		return
	}
	u := usageOf(rec, turn)
	resp := map[string]any{
		"id": s.newID("resp_"), "object": "response", "created_at": time.Now().Unix(),
		"status": "in_progress", "model": s.model(rec), "output": []any{},
		"error": nil, "incomplete_details": nil, "usage": nil,
		"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
	}
	if !rec.Stream {
		resp["status"], resp["output"], resp["usage"] = "completed", items, openAIUsage(u)
		writeJSON(w, http.StatusOK, resp)
		return
	}
	_ = openAIStream(newSSE(w), resp, items, openAIUsage(u))
}

// openAIStream writes the documented Responses streaming events:
// response.created, response.in_progress, per output item
// response.output_item.added, its content or argument deltas and dones,
// response.output_item.done, and response.completed with usage.
func openAIStream(e *sse, resp map[string]any, items []map[string]any, usage map[string]any) error {
	ev := openAIEmitter(e)
	if err := ev("response.created", map[string]any{"response": resp}); err != nil {
		return err
	}
	if err := ev("response.in_progress", map[string]any{"response": resp}); err != nil {
		return err
	}
	for i, item := range items {
		if err := openAIStreamItem(ev, i, item); err != nil {
			return err
		}
	}
	done := map[string]any{}
	for k, v := range resp {
		done[k] = v
	}
	done["status"], done["output"], done["usage"] = "completed", items, usage
	return ev("response.completed", map[string]any{"response": done})
}

// openAIEvent writes one Responses streaming event of type typ.
type openAIEvent func(typ string, fields map[string]any) error

// openAIEmitter writes events to e, each with its type and the stream's
// next sequence number.
func openAIEmitter(e *sse) openAIEvent {
	return func(typ string, fields map[string]any) error {
		fields["type"] = typ
		fields["sequence_number"] = e.seq
		e.seq++
		return e.event(typ, fields)
	}
}

// openAIStreamItem writes output item i: its added event, its content or
// argument deltas and dones, and its done event.
func openAIStreamItem(ev openAIEvent, i int, item map[string]any) error {
	if err := ev("response.output_item.added", map[string]any{"output_index": i, "item": openAIItemAdded(item)}); err != nil {
		return err
	}
	var err error
	switch item["type"] {
	case "message":
		err = openAIStreamMessage(ev, i, item)
	case "function_call":
		err = openAIStreamArguments(ev, i, item)
	case "custom_tool_call":
		err = openAIStreamInput(ev, i, item)
	}
	if err != nil {
		return err
	}
	return ev("response.output_item.done", map[string]any{"output_index": i, "item": item})
}

// openAIItemAdded is item as response.output_item.added shows it: in
// progress, with its content, arguments or input still empty.
func openAIItemAdded(item map[string]any) map[string]any {
	added := map[string]any{}
	for k, v := range item {
		added[k] = v
	}
	added["status"] = "in_progress"
	switch item["type"] {
	case "message":
		added["content"] = []any{}
	case "function_call":
		added["arguments"] = ""
	case "custom_tool_call":
		added["input"] = ""
	}
	return added
}

// openAIStreamMessage writes a message item's content part and its text
// deltas.
func openAIStreamMessage(ev openAIEvent, i int, item map[string]any) error {
	id := item["id"]
	text := item["content"].([]map[string]any)[0]["text"].(string)
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	if err := ev("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part}); err != nil {
		return err
	}
	for _, c := range chunks(text, 3) {
		if err := ev("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": c, "logprobs": []any{}}); err != nil {
			return err
		}
	}
	if err := ev("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}}); err != nil {
		return err
	}
	part = map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	return ev("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
}

// openAIStreamArguments writes a function_call item's argument deltas.
func openAIStreamArguments(ev openAIEvent, i int, item map[string]any) error {
	id := item["id"]
	args := item["arguments"].(string)
	for _, c := range chunks(args, 3) {
		if err := ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": c}); err != nil {
			return err
		}
	}
	return ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "name": item["name"], "arguments": args})
}

// openAIStreamInput writes a custom_tool_call item's input deltas.
func openAIStreamInput(ev openAIEvent, i int, item map[string]any) error {
	id := item["id"]
	input := item["input"].(string)
	for _, c := range chunks(input, 3) {
		if err := ev("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": i, "delta": c}); err != nil {
			return err
		}
	}
	return ev("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": i, "input": input})
}

// openAIOutput renders a turn as Responses output items. A call to a tool
// the request offers as "custom" becomes a custom_tool_call whose input is
// the raw text; any other becomes a function_call with JSON arguments.
func (s *Server) openAIOutput(rec *Request, t Turn) ([]map[string]any, error) {
	var out []map[string]any
	if t.Text != "" || len(t.ToolCalls) == 0 {
		out = append(out, map[string]any{
			"id": s.newID("msg_"), "type": "message", "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": t.Text, "annotations": []any{}}},
		})
	}
	for _, c := range t.ToolCalls {
		callID := c.ID
		if callID == "" {
			callID = s.newID("call_")
		}
		if str, ok := c.Input.(string); ok && rec.ToolType(c.Name) == "custom" {
			out = append(out, map[string]any{
				"id": s.newID("ctc_"), "type": "custom_tool_call", "status": "completed",
				"call_id": callID, "name": c.Name, "input": str,
			})
			continue
		}
		args, err := inputJSON(c.Input)
		if err != nil {
			return nil, fmt.Errorf("tool call %s: %w", c.Name, err)
		}
		out = append(out, map[string]any{
			"id": s.newID("fc_"), "type": "function_call", "status": "completed",
			"call_id": callID, "name": c.Name, "arguments": args,
		})
	}
	return out, nil
}

// openAIUsage is u as an OpenAI usage object: its input counts the
// cached tokens too.
func openAIUsage(u Usage) map[string]any {
	in := u.Input + u.CacheRead
	return map[string]any{
		"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": u.CacheRead},
		"output_tokens": u.Output, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": in + u.Output,
	}
}

// openAIModels answers GET /v1/models and /v1/models/{id}.
func (s *Server) openAIModels(w http.ResponseWriter, _ *Request, id string) {
	model := func(n string) map[string]any {
		return map[string]any{"id": n, "object": "model", "created": 1735689600, "owned_by": "modeltest"}
	}
	if id != "" {
		writeJSON(w, http.StatusOK, model(id))
		return
	}
	name := s.cfg.Model
	if name == "" {
		name = "gpt-5"
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{model(name)}})
}
