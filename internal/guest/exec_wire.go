package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/guestapi"
)

// wsWire drives an exec over a WebSocket: binary frames carry a channel
// byte and data, text frames carry controls, in both directions.
type wsWire struct {
	conn *websocket.Conn
	ctx  context.Context
}

// readStart reads and validates ExecStart. On failure it has answered.
func (w *wsWire) readStart(x *execRun) (guestapi.ExecStart, bool) {
	var start guestapi.ExecStart
	rctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	typ, msg, err := w.conn.Read(rctx)
	cancel()
	if err != nil {
		return start, false
	}
	fail := func(msg string) (guestapi.ExecStart, bool) {
		x.finish(guestapi.Control{Type: "exit", ExitCode: -1, Error: msg})
		return start, false
	}
	switch {
	case typ != websocket.MessageText:
		return fail("first message must be a text ExecStart")
	case len(msg) > maxControlMessage:
		_ = w.conn.Close(websocket.StatusMessageTooBig, "ExecStart exceeds 64 KiB")
		return start, false
	}
	if err := json.Unmarshal(msg, &start); err != nil {
		return fail(fmt.Sprintf("decode ExecStart: %v", err))
	}
	if msg := checkStart(start); msg != "" {
		return fail(msg)
	}
	return start, true
}

func (w *wsWire) data(ch byte, p []byte) error {
	return w.conn.Write(w.ctx, websocket.MessageBinary, append([]byte{ch}, p...))
}

func (w *wsWire) control(c guestapi.Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return w.conn.Write(w.ctx, websocket.MessageText, b)
}

// serve handles stdin frames and control messages until the stream ends.
func (w *wsWire) serve(x *execRun, tty bool) error {
	for {
		typ, msg, err := w.conn.Read(w.ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			if len(msg) < 1 || msg[0] != guestapi.ChanStdin || x.stdin == nil {
				continue
			}
			if _, err := x.stdin.Write(msg[1:]); err != nil {
				x.s.log.Debug("stdin write failed", "err", err)
			}
			continue
		}
		if len(msg) > maxControlMessage {
			_ = w.conn.Close(websocket.StatusMessageTooBig, "control message exceeds 64 KiB")
			return errors.New("control message too large")
		}
		var c guestapi.Control
		if err := json.Unmarshal(msg, &c); err != nil {
			x.s.log.Debug("bad control message", "err", err)
			continue
		}
		x.control(c, tty)
	}
}

// close ends the exchange with a bounded close handshake: a client that
// never answers it is cut off.
func (w *wsWire) close() {
	t := time.AfterFunc(2*time.Second, func() { _ = w.conn.CloseNow() })
	defer t.Stop()
	_ = w.conn.Close(websocket.StatusNormalClosure, "")
}

// streamWire drives an exec over one plain HTTP request: stdin came whole
// in the request, output goes back as NDJSON StreamFrame lines, flushed as
// produced. The connection stays reusable (no upgrade).
type streamWire struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	enc   *json.Encoder
	stdin []byte
}

// write encodes f; output is flushed at once, while the exit frame goes
// out with the end of the response, in the same write.
func (w *streamWire) write(f guestapi.StreamFrame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(f); err != nil {
		return err
	}
	if f.Type == "exit" {
		return nil
	}
	return http.NewResponseController(w.w).Flush()
}

func (w *streamWire) data(ch byte, p []byte) error {
	typ := "stdout"
	if ch == guestapi.ChanStderr {
		typ = "stderr"
	}
	return w.write(guestapi.StreamFrame{Type: typ, Data: p})
}

func (w *streamWire) control(c guestapi.Control) error {
	if c.Type != "exit" {
		return nil // "started" has no NDJSON frame
	}
	return w.write(guestapi.StreamFrame{Type: "exit", ExitCode: c.ExitCode, Error: c.Error, TimedOut: c.TimedOut})
}

// serve writes the whole stdin, closes it, then waits for the client to
// go away (the request's context) or the exec to finish.
func (w *streamWire) serve(x *execRun, _ bool) error {
	if x.stdin != nil {
		if _, err := x.stdin.Write(w.stdin); err != nil {
			x.s.log.Debug("stdin write failed", "err", err)
		}
		x.closeStdin()
	}
	<-x.ctx.Done()
	return x.ctx.Err()
}

func (w *streamWire) close() {}

// handleExecRun runs a command to completion over one HTTP request.
func (s *Server) handleExecRun(w http.ResponseWriter, r *http.Request) {
	var req guestapi.ExecRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxExecRequest))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "decode exec request: "+err.Error())
		return
	}
	start := guestapi.ExecStart{Argv: req.Argv, Env: req.Env, Dir: req.Dir, TimeoutMS: req.TimeoutMS, Stdin: len(req.Stdin) > 0}
	if msg := checkStart(start); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &streamWire{w: w, enc: json.NewEncoder(w), stdin: req.Stdin}
	x := &execRun{s: s, wire: sw, ctx: ctx, cancel: cancel}
	x.run(start)
}

// maxExecRequest bounds a plain exec request (stdin included).
const maxExecRequest = 16 << 20
