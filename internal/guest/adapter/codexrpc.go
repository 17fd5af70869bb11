package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// codex app-server speaks JSON-RPC 2.0 over stdio, one JSON object a line,
// without the "jsonrpc" member. Requests go both ways: the adapter's
// (initialize, thread/start, thread/resume, turn/start, turn/interrupt)
// and the server's (approvals), answered here.

// Bounds of what the adapter reads from codex app-server.
const (
	// maxRPCID bounds a request id the server sends (echoed back).
	maxRPCID = 128
	// maxCallLines is how many other lines may come before a request's
	// answer; a server that keeps talking without answering is given up on.
	maxCallLines = 10000
)

// rpcMessage is one JSON-RPC message: a request (ID and Method), a
// notification (Method only) or a response (ID, and Result or Error).
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error object; as a Go error, the server refused a
// request.
type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// JSON-RPC error codes the adapter answers with.
const rpcMethodNotFound = -32601

func (m *rpcMessage) isRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *rpcMessage) isNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *rpcMessage) isResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

// decodeRPC decodes one line from the server; false for anything that is
// not a JSON-RPC message (too long, not an object, an id that is neither a
// short string nor a number, no method and no id).
func decodeRPC(b []byte) (rpcMessage, bool) {
	var m rpcMessage
	if len(b) > maxHarnessLine || json.Unmarshal(b, &m) != nil {
		return rpcMessage{}, false
	}
	if len(m.ID) > 0 {
		m.ID = bytes.TrimSpace(m.ID)
		if bytes.Equal(m.ID, []byte("null")) {
			m.ID = nil
		} else if len(m.ID) > maxRPCID || !validRPCID(m.ID) {
			return rpcMessage{}, false
		}
	}
	if m.Method == "" && len(m.ID) == 0 {
		return rpcMessage{}, false
	}
	return m, true
}

func validRPCID(id json.RawMessage) bool {
	var s string
	if json.Unmarshal(id, &s) == nil {
		return true
	}
	_, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil
}

// rpcAnswer is how the adapter answers a server request: the session's
// approval policy is "never" (codex asks nothing and runs what the sandbox
// mode allows, as codex exec did), so a request for more is declined, and
// a request it does not serve is refused.
func rpcAnswer(m rpcMessage) (any, *rpcError) {
	switch m.Method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval":
		return map[string]string{"decision": "decline"}, nil
	case "execCommandApproval", "applyPatchApproval":
		return map[string]any{"decision": map[string]any{"denied": map[string]string{
			"rejection": "the session's approval policy is never"}}}, nil
	}
	return nil, &rpcError{Code: rpcMethodNotFound, Message: "engrams does not serve " + capText(m.Method, 200)}
}

// errAppServerExited: codex app-server ended while the adapter waited.
var errAppServerExited = errors.New("codex app-server ended")

// errAppServerStalled: codex app-server printed nothing for the stall time.
var errAppServerStalled = errors.New("codex app-server stalled")

// appServer is one running codex app-server process.
type appServer struct {
	p      *hproc
	pc     procConfig
	key    string // the launch parameters
	nextID int64
}

// write sends one message, giving up when ctx ends or the server stops
// reading for the stall time (the process is then stopped).
func (s *appServer) write(ctx context.Context, msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode codex request: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.p.stdin.Write(append(b, '\n'))
		done <- err
	}()
	t := time.NewTimer(s.pc.stall)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("write to codex app-server: %w", err)
		}
		return nil
	case <-ctx.Done():
		s.p.stop(0)
		<-done
		return ctx.Err()
	case <-t.C:
		s.p.stop(0)
		<-done
		return errAppServerStalled
	}
}

// request sends a request and returns its id.
func (s *appServer) request(ctx context.Context, method string, params any) (int64, error) {
	s.nextID++
	id := s.nextID
	return id, s.write(ctx, map[string]any{"id": id, "method": method, "params": params})
}

func (s *appServer) notify(ctx context.Context, method string) error {
	return s.write(ctx, map[string]any{"method": method})
}

// dispatch handles one line: a server request is answered, a notification
// goes to note, a response is returned.
func (s *appServer) dispatch(ctx context.Context, b []byte, note func(rpcMessage)) (rpcMessage, bool) {
	m, ok := decodeRPC(b)
	switch {
	case !ok:
		return rpcMessage{}, false
	case m.isRequest():
		result, rerr := rpcAnswer(m)
		s.pc.log.Warn("codex asked the adapter", "method", capText(m.Method, 200), "answered_error", rerr != nil)
		reply := map[string]any{"id": m.ID}
		if rerr != nil {
			reply["error"] = rerr
		} else {
			reply["result"] = result
		}
		if err := s.write(ctx, reply); err != nil {
			s.pc.log.Warn("answer codex", "err", err)
		}
	case m.isNotification():
		if note != nil {
			note(m)
		}
	case m.isResponse():
		return m, true
	}
	return rpcMessage{}, false
}

// call sends a request and reads until its response, handing the
// notifications that come meanwhile to note.
func (s *appServer) call(ctx context.Context, method string, params any, note func(rpcMessage)) (json.RawMessage, error) {
	id, err := s.request(ctx, method, params)
	if err != nil {
		return nil, err
	}
	want := strconv.FormatInt(id, 10)
	var resp rpcMessage
	lines := 0
	end := s.pc.pump(ctx, s.p, func(b []byte) bool {
		lines++
		m, ok := s.dispatch(ctx, b, note)
		if ok && string(m.ID) == want {
			resp = m
			return true
		}
		return lines >= maxCallLines
	})
	switch {
	case end == pumpCancelled:
		return nil, ctx.Err()
	case end == pumpStalled:
		return nil, errAppServerStalled
	case end == pumpExited:
		return nil, fmt.Errorf("%w: %s", errAppServerExited, s.p.exitText(s.pc.stderrPath))
	case resp.ID == nil:
		return nil, fmt.Errorf("codex app-server sent %d lines without answering %s", lines, method)
	case resp.Error != nil:
		return nil, resp.Error
	}
	return resp.Result, nil
}
