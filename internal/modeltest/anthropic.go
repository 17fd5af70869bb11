package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// anthropicRequest is the part of a Messages API request the server reads.
type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// parseAnthropic fills rec's model-call fields from a Messages request.
func parseAnthropic(rec *Request) error {
	var req anthropicRequest
	if err := json.Unmarshal(rec.Body, &req); err != nil {
		return fmt.Errorf("decode messages request: %w", err)
	}
	rec.Model, rec.Stream = req.Model, req.Stream
	for _, t := range req.Tools {
		typ := t.Type
		if typ == "" {
			typ = "custom"
		}
		rec.Tools = append(rec.Tools, ToolSpec{Name: t.Name, Type: typ})
	}
	for _, m := range req.Messages {
		msg := Message{Role: m.Role}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			msg.Text = s
			rec.Messages = append(rec.Messages, msg)
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return fmt.Errorf("decode message content: %w", err)
		}
		var texts []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Input: b.Input})
			case "tool_result":
				msg.ToolResults = append(msg.ToolResults, ToolResult{CallID: b.ToolUseID, Content: jsonText(b.Content), IsError: b.IsError})
			}
		}
		msg.Text = joinNonEmpty(texts)
		rec.Messages = append(rec.Messages, msg)
	}
	nameToolResults(rec.Messages)
	return nil
}

func (s *Server) anthropicMessages(ctx context.Context, w http.ResponseWriter, rec *Request) {
	if err := parseAnthropic(rec); err != nil {
		writeAnthropicError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := s.pick(rec)
	wait(ctx, turn.Delay)
	if turn.Fail != nil {
		writeAnthropicError(w, turn.Fail)
		return
	}
	content, err := s.anthropicContent(turn)
	if err != nil {
		writeAnthropicError(w, &APIError{Status: http.StatusInternalServerError, Type: "api_error", Message: err.Error()})
		return
	}
	stop := turn.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(turn.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}
	u := usageOf(rec, turn)
	msgID := s.newID("msg_")
	if !rec.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": s.model(rec),
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": anthropicUsage(u, u.Output),
		})
		return
	}
	_ = s.anthropicStream(newSSE(w), rec, msgID, content, stop, u)
}

// anthropicStream writes the documented event sequence: message_start, ping,
// per block content_block_start / _delta… / _stop, message_delta (stop reason
// and usage), message_stop.
func (s *Server) anthropicStream(e *sse, rec *Request, msgID string, content []map[string]any, stop string, u Usage) error {
	if err := e.event("message_start", map[string]any{
		"type": "message_start",
		"message": map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": s.model(rec),
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": anthropicUsage(u, 1),
		},
	}); err != nil {
		return err
	}
	if err := e.event("ping", map[string]any{"type": "ping"}); err != nil {
		return err
	}
	for i, b := range content {
		var start map[string]any
		var deltas []map[string]any
		switch b["type"] {
		case "text":
			start = map[string]any{"type": "text", "text": ""}
			for _, c := range chunks(b["text"].(string), 3) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": c})
			}
		case "tool_use":
			start = map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
			in, _ := json.Marshal(b["input"])
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": ""})
			for _, c := range chunks(string(in), 3) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": c})
			}
		}
		if err := e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start}); err != nil {
			return err
		}
		for _, d := range deltas {
			if err := e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}); err != nil {
				return err
			}
		}
		if err := e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}); err != nil {
			return err
		}
	}
	if err := e.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": u.Output},
	}); err != nil {
		return err
	}
	return e.event("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicContent renders a turn as Messages API content blocks.
func (s *Server) anthropicContent(t Turn) ([]map[string]any, error) {
	var out []map[string]any
	if t.Text != "" {
		out = append(out, map[string]any{"type": "text", "text": t.Text})
	}
	for _, c := range t.ToolCalls {
		in, err := inputJSON(c.Input)
		if err != nil {
			return nil, fmt.Errorf("tool call %s: %w", c.Name, err)
		}
		id := c.ID
		if id == "" {
			id = s.newID("toolu_")
		}
		out = append(out, map[string]any{"type": "tool_use", "id": id, "name": c.Name, "input": json.RawMessage(in)})
	}
	if len(out) == 0 {
		out = append(out, map[string]any{"type": "text", "text": ""})
	}
	return out, nil
}

// anthropicUsage is u as an Anthropic usage object reporting out output
// tokens (a stream's message_start reports 1, its message_delta the rest).
func anthropicUsage(u Usage, out int) map[string]any {
	return map[string]any{
		"input_tokens": u.Input, "output_tokens": out,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead,
		"service_tier": "standard",
	}
}

func (s *Server) anthropicCountTokens(w http.ResponseWriter, rec *Request) {
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(rec.Body)/4 + 1})
}

// anthropicModels answers GET /v1/models and /v1/models/{id}.
func (s *Server) anthropicModels(w http.ResponseWriter, _ *Request, id string) {
	names := []string{"claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"}
	if s.cfg.Model != "" {
		names = []string{s.cfg.Model}
	}
	model := func(n string) map[string]any {
		return map[string]any{"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"}
	}
	if id != "" {
		writeJSON(w, http.StatusOK, model(id))
		return
	}
	var data []map[string]any
	for _, n := range names {
		data = append(data, model(n))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": names[0], "last_id": names[len(names)-1]})
}

func joinNonEmpty(parts []string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += "\n"
		}
		out += p
	}
	return out
}
