package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Config configures a scripted model server.
type Config struct {
	// APIKey is the only key accepted (x-api-key or Authorization: Bearer);
	// any other answers 401 in the provider's error shape. Empty accepts any
	// key, including none.
	APIKey string
	// Script is the turns, tried in order for each model request.
	Script []Turn
	// Fallback answers a model request no turn matches; nil answers the
	// text "ok".
	Fallback *Turn
	// Model, when set, is the model the answers name; otherwise the
	// request's model is echoed.
	Model string
	// XShouldRetry, when "true" or "false", is sent as the x-should-retry
	// header on every error answer. Anthropic's SDKs (and so claude) obey
	// it; without it claude retries a 401 up to CLAUDE_CODE_MAX_RETRIES
	// times (default 10) with backoff.
	XShouldRetry string
	// Logf, when set, receives one line per request (t.Logf fits).
	Logf func(format string, args ...any)
}

// Server is a scripted model API: the Anthropic Messages API
// (POST /v1/messages, /v1/messages/count_tokens, GET /v1/models) and the
// OpenAI Responses API (POST /v1/responses, GET /v1/models) on one handler.
// Each route also answers without the /v1 prefix. It records every request.
type Server struct {
	cfg Config

	mu       sync.Mutex
	key      string
	script   []Turn
	requests []Request
	ids      int

	ts *httptest.Server
}

// New returns a server for cfg. It is an http.Handler; Start serves it on
// 127.0.0.1.
func New(cfg Config) (*Server, error) {
	for i, t := range cfg.Script {
		for _, c := range t.ToolCalls {
			if c.Name == "" {
				return nil, fmt.Errorf("modeltest: script turn %d (%q): tool call without a name", i, t.Name)
			}
		}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Server{cfg: cfg, key: cfg.APIKey, script: cfg.Script}, nil
}

// Start serves a new server on 127.0.0.1 until the test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("new model server: %v", err)
	}
	s.ts = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

// URL is the base URL without /v1 (ANTHROPIC_BASE_URL takes it as is; an
// OpenAI base URL is URL()+"/v1"); empty for a server not started by Start.
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close stops a server started with Start.
func (s *Server) Close() {
	if s.ts != nil {
		s.ts.CloseClientConnections()
		s.ts.Close()
	}
}

// SetScript replaces the script for the requests that follow.
func (s *Server) SetScript(turns []Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = turns
}

// SetAPIKey replaces the accepted key for the requests that follow.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// Requests is a copy of every request recorded so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ModelRequests is the recorded model calls (POST /v1/messages or
// /v1/responses, answered or refused), in arrival order.
func (s *Server) ModelRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.IsModelCall() {
			out = append(out, r)
		}
	}
	return out
}

// Unknown is the recorded requests the server had no route for.
func (s *Server) Unknown() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if !r.Known {
			out = append(out, r)
		}
	}
	return out
}

// ServeHTTP answers one request and records it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rec := &Request{
		Received: time.Now(),
		Method:   r.Method,
		Path:     r.URL.Path,
		Query:    r.URL.RawQuery,
		Header:   r.Header.Clone(),
		Body:     body,
		APIKey:   presentedKey(r),
		Known:    true,
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.route(r.Context(), sw, rec)
	rec.Status = sw.status
	s.mu.Lock()
	rec.Seq = len(s.requests) + 1
	s.requests = append(s.requests, *rec)
	s.mu.Unlock()
	known := ""
	if !rec.Known {
		known = " UNKNOWN"
	}
	s.cfg.Logf("modeltest: %s %s?%s → %d%s turn=%q", rec.Method, rec.Path, rec.Query, rec.Status, known, rec.Turn)
	if !rec.Known {
		s.cfg.Logf("modeltest: unknown request headers=%v body=%.2000s", rec.Header, rec.Body)
	}
}

func (s *Server) route(ctx context.Context, w http.ResponseWriter, rec *Request) {
	p := "/" + strings.TrimPrefix(strings.TrimPrefix(rec.Path, "/"), "v1/")
	anthropic := isAnthropic(rec)
	if (rec.Method == http.MethodHead || rec.Method == http.MethodGet) && p == "/" {
		// claude probes the base URL (HEAD /) after a failed call to tell
		// an outage from a network problem; no key is sent.
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.cfg.XShouldRetry != "" {
		w = &retryHeaderWriter{ResponseWriter: w, value: s.cfg.XShouldRetry}
	}
	if !s.authorized(rec.APIKey) {
		if anthropic {
			writeAnthropicError(w, authError(anthropic))
		} else {
			writeOpenAIError(w, authError(anthropic))
		}
		return
	}
	switch {
	case rec.Method == http.MethodPost && p == "/messages":
		s.anthropicMessages(ctx, w, rec)
	case rec.Method == http.MethodPost && p == "/messages/count_tokens":
		s.anthropicCountTokens(w, rec)
	case rec.Method == http.MethodPost && p == "/responses":
		s.openAIResponses(ctx, w, rec)
	case rec.Method == http.MethodGet && (p == "/models" || strings.HasPrefix(p, "/models/")):
		if anthropic {
			s.anthropicModels(w, rec, strings.TrimPrefix(strings.TrimPrefix(p, "/models"), "/"))
		} else {
			s.openAIModels(w, rec, strings.TrimPrefix(strings.TrimPrefix(p, "/models"), "/"))
		}
	default:
		rec.Known = false
		e := &APIError{Status: http.StatusNotFound, Type: "not_found_error", Message: "modeltest: no route for " + rec.Method + " " + rec.Path}
		if anthropic {
			writeAnthropicError(w, e)
		} else {
			e.Type = "invalid_request_error"
			writeOpenAIError(w, e)
		}
	}
}

// pick chooses the turn for a parsed model request.
func (s *Server) pick(rec *Request) Turn {
	s.mu.Lock()
	script := s.script
	s.mu.Unlock()
	for i, t := range script {
		if t.When != nil && !t.When(rec) {
			continue
		}
		if !offersAll(rec, t.ToolCalls) {
			continue
		}
		rec.Turn = t.Name
		if rec.Turn == "" {
			rec.Turn = fmt.Sprintf("turn %d", i)
		}
		return t
	}
	rec.Turn = "fallback"
	if s.cfg.Fallback != nil {
		return *s.cfg.Fallback
	}
	return Turn{Text: "ok"}
}

// wait holds an answer back for d, or until the client goes away.
func wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// offersAll reports whether a request that lists tools offers every called
// one: a model never calls a tool it was not given.
func offersAll(rec *Request, calls []ToolCall) bool {
	for _, c := range calls {
		if !rec.OffersTool(c.Name) {
			return false
		}
	}
	return true
}

func (s *Server) authorized(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key == "" || key == s.key
}

func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s%024d", prefix, s.ids)
}

func (s *Server) model(rec *Request) string {
	if s.cfg.Model != "" {
		return s.cfg.Model
	}
	if rec.Model != "" {
		return rec.Model
	}
	return "scripted-model"
}

func presentedKey(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// isAnthropic tells an Anthropic client from an OpenAI one by its headers
// and path.
func isAnthropic(rec *Request) bool {
	h := http.Header(rec.Header)
	if h.Get("anthropic-version") != "" || h.Get("x-api-key") != "" {
		return true
	}
	return strings.Contains(rec.Path, "/messages")
}

func authError(anthropic bool) *APIError {
	if anthropic {
		return &APIError{Status: http.StatusUnauthorized, Type: "authentication_error", Message: "invalid x-api-key"}
	}
	return &APIError{
		Status:  http.StatusUnauthorized,
		Type:    "invalid_request_error",
		Code:    "invalid_api_key",
		Message: "Incorrect API key provided. You can find your API key in your account settings.",
	}
}

// writeAnthropicError writes Anthropic's error shape:
// {"type":"error","error":{"type":…,"message":…},"request_id":…}.
func writeAnthropicError(w http.ResponseWriter, e *APIError) {
	id := fmt.Sprintf("req_modeltest%d", time.Now().UnixNano())
	w.Header().Set("request-id", id)
	writeJSON(w, e.Status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": e.Type, "message": e.Message},
		"request_id": id,
	})
}

// writeOpenAIError writes OpenAI's error shape:
// {"error":{"message":…,"type":…,"param":null,"code":…}}.
func writeOpenAIError(w http.ResponseWriter, e *APIError) {
	var code any
	if e.Code != "" {
		code = e.Code
	}
	writeJSON(w, e.Status, map[string]any{
		"error": map[string]any{"message": e.Message, "type": e.Type, "param": nil, "code": code},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events and flushes each one.
type sse struct {
	w   http.ResponseWriter
	seq int
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w}
}

// event writes "event: <name>\ndata: <json>\n\n".
func (e *sse) event(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", name, err)
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return fmt.Errorf("write %s event: %w", name, err)
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

// retryHeaderWriter adds x-should-retry to error answers.
type retryHeaderWriter struct {
	http.ResponseWriter
	value string
}

func (w *retryHeaderWriter) WriteHeader(code int) {
	if code >= 400 {
		w.Header().Set("x-should-retry", w.value)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *retryHeaderWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// chunks splits s into up to n pieces of about equal length (at least one,
// possibly empty), so text and tool input stream in several deltas.
func chunks(s string, n int) []string {
	r := []rune(s)
	if len(r) == 0 || n <= 1 {
		return []string{s}
	}
	size := (len(r) + n - 1) / n
	var out []string
	for len(r) > 0 {
		k := min(size, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// inputJSON renders a tool call's input as JSON text.
func inputJSON(in any) (string, error) {
	switch v := in.(type) {
	case nil:
		return "{}", nil
	case json.RawMessage:
		return string(v), nil
	case string:
		if json.Valid([]byte(v)) {
			return v, nil
		}
		return "", errors.New("tool input string is not JSON")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("encode tool input: %w", err)
	}
	return string(b), nil
}
