package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/engrams/engrams/internal/connector"
)

// DefaultAPIURL is Slack's Web API.
const DefaultAPIURL = "https://slack.com/api/"

// maxResponse bounds a Web API answer.
const maxResponse = 1 << 20

// maxText bounds a message's text (Slack truncates past 40,000; a turn
// shows its last part).
const maxText = 3900

// web calls Slack's Web API with a token.
type web struct {
	base  string
	token string
	http  *http.Client
}

// apiError is a Web API answer with ok false.
type apiError struct{ method, code string }

func (e *apiError) Error() string { return "slack " + e.method + ": " + e.code }

// call POSTs params as JSON to method and decodes the answer into out.
func (w web) call(ctx context.Context, method string, params, out any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	return w.do(req, method, out)
}

// get calls a read method with query parameters.
func (w web) get(ctx context.Context, method string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+method+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	return w.do(req, method, out)
}

func (w web) do(req *http.Request, method string, out any) error {
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.http.Do(req)
	if err != nil {
		return fmt.Errorf("slack %s: %w", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return fmt.Errorf("slack %s: %w", method, err)
	}
	if len(b) > maxResponse {
		return fmt.Errorf("slack %s: the answer is over %d bytes", method, maxResponse)
	}
	var head struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("slack %s: HTTP %d: not JSON", method, resp.StatusCode)
	}
	if !head.OK {
		return &apiError{method: method, code: connector.Clip(head.Error, 100)}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// metadata marks the messages engrams posts, so a post made before a
// crash is found instead of made twice.
type metadata struct {
	EventType    string            `json:"event_type"`
	EventPayload map[string]string `json:"event_payload"`
}

const metaType = "engrams_post"

func (w web) post(ctx context.Context, channel, thread, text, key string) (string, error) {
	var out struct {
		TS string `json:"ts"`
	}
	params := map[string]any{"channel": channel, "text": connector.Clip(text, maxText), "unfurl_links": false, "unfurl_media": false,
		"metadata": metadata{EventType: metaType, EventPayload: map[string]string{"key": key}}}
	if thread != "" {
		params["thread_ts"] = thread
	}
	err := w.call(ctx, "chat.postMessage", params, &out)
	return out.TS, err
}

func (w web) update(ctx context.Context, channel, ts, text string) error {
	return w.call(ctx, "chat.update", map[string]any{"channel": channel, "ts": ts, "text": connector.Clip(text, maxText)}, nil)
}

func (w web) react(ctx context.Context, channel, ts, name string) error {
	err := w.call(ctx, "reactions.add", map[string]any{"channel": channel, "timestamp": ts, "name": name}, nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == "already_reacted" {
		return nil
	}
	return err
}

// message is what engrams reads of a message.
type message struct {
	TS       string   `json:"ts"`
	Text     string   `json:"text"`
	Metadata metadata `json:"metadata"`
}

// find looks for a message engrams posted with key: in thread when given,
// else among the channel's latest.
func (w web) find(ctx context.Context, channel, thread, key string) (string, error) {
	var out struct {
		Messages []message `json:"messages"`
	}
	q := url.Values{"channel": {channel}, "include_all_metadata": {"true"}, "limit": {"200"}}
	method := "conversations.history"
	if thread != "" {
		q.Set("ts", thread)
		method = "conversations.replies"
	}
	if err := w.get(ctx, method, q, &out); err != nil {
		return "", err
	}
	for _, m := range out.Messages {
		if m.Metadata.EventType == metaType && m.Metadata.EventPayload["key"] == key {
			return m.TS, nil
		}
	}
	return "", nil
}

// postOnce posts text unless a message with key is there already; found
// says it was (posted before a crash, perhaps with less text).
func (w web) postOnce(ctx context.Context, channel, thread, text, key string) (ts string, found bool, err error) {
	ts, err = w.find(ctx, channel, thread, key)
	if err != nil || ts != "" {
		return ts, ts != "", err
	}
	ts, err = w.post(ctx, channel, thread, text, key)
	return ts, false, err
}

// connectionsOpen asks for a Socket Mode URL (with the app-level token).
func (w web) connectionsOpen(ctx context.Context) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	if err := w.call(ctx, "apps.connections.open", map[string]any{}, &out); err != nil {
		return "", err
	}
	if !strings.HasPrefix(out.URL, "wss://") && !strings.HasPrefix(out.URL, "ws://") {
		return "", fmt.Errorf("slack apps.connections.open: %q is not a WebSocket URL", connector.Clip(out.URL, 100))
	}
	return out.URL, nil
}
