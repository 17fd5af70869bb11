package adapter

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/guestapi"
)

// Bounds of event data, so that every event line stays small.
const (
	maxTextEvent  = 256 << 10 // assistant text
	maxInputEvent = 64 << 10  // a tool call's input, as JSON
	maxInputField = 4 << 10   // a string inside a cut-down tool input
)

// cutNote ends text that was cut.
const cutNote = "\n…[cut: output longer than the limit]"

// capText cuts s to at most n bytes (on a rune boundary) with a note.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n - len(cutNote)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + cutNote
}

// capInput bounds a tool input: a large object keeps its keys with long
// strings cut; what is still too large becomes a summary.
func capInput(raw json.RawMessage) json.RawMessage {
	if len(raw) <= maxInputEvent {
		return raw
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for k, v := range m {
			if s, ok := v.(string); ok && len(s) > maxInputField {
				m[k] = capText(s, maxInputField)
			}
		}
		if b, err := json.Marshal(m); err == nil && len(b) <= maxInputEvent {
			return b
		}
	}
	return mustJSON(map[string]any{"truncated": true, "bytes": len(raw)})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// contentText is the text of a tool result's content: a string, or blocks
// with a "text" field.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []json.RawMessage
	if json.Unmarshal(raw, &blocks) == nil {
		return blocksText(blocks)
	}
	var obj struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && len(obj.Content) > 0 {
		return contentText(obj.Content)
	}
	return string(raw)
}

// blocksText joins the "text" fields of content blocks.
func blocksText(blocks []json.RawMessage) string {
	var parts []string
	for _, b := range blocks {
		var blk struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(b, &blk) == nil && blk.Text != "" {
			parts = append(parts, blk.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// relPath is p relative to dir when inside it, else p cleaned.
func relPath(dir, p string) string {
	if !filepath.IsAbs(p) || dir == "" {
		return filepath.Clean(p)
	}
	if rel, err := filepath.Rel(dir, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return rel
	}
	return filepath.Clean(p)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func stallError(d time.Duration) *guestapi.ErrorData {
	return &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: fmt.Sprintf("the harness printed nothing for %v; stopped", d)}
}
