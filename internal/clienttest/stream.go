package clienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/api/apiv1"
)

// result is what the fake shell makes of a command.
type result struct {
	stdout, stderr string
	code           int
	err            string
	timedOut       bool
}

// run is the fake shell:
//
//	echo ARGS...   prints ARGS to stdout
//	err ARGS...    prints ARGS to stderr
//	exit N         exits with N
//	cat            copies stdin to stdout
//	env            prints the sorted environment and the working directory
//	timeout        times out
//	anything else  could not start (exit 127)
func run(argv []string, env map[string]string, dir string, stdin []byte) result {
	args := strings.Join(argv[1:], " ")
	switch argv[0] {
	case "echo":
		return result{stdout: args + "\n"}
	case "err":
		return result{stderr: args + "\n"}
	case "exit":
		n, _ := strconv.Atoi(args)
		return result{stdout: "bye\n", code: n}
	case "cat":
		return result{stdout: string(stdin)}
	case "env":
		var lines []string
		for k, v := range env {
			lines = append(lines, k+"="+v)
		}
		slices.Sort(lines)
		return result{stdout: strings.Join(append(lines, "dir="+dir), "\n") + "\n"}
	case "timeout":
		return result{stdout: "working\n", err: "timed out", timedOut: true, code: -1}
	default:
		return result{err: fmt.Sprintf("exec: %q: executable file not found in $PATH", argv[0]), code: 127}
	}
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, id string) {
	var req apiv1.ExecRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Argv) == 0 {
		writeErr(w, 400, "bad_request", "argv is required")
		return
	}
	res := run(req.Argv, req.Env, req.Dir, req.Stdin)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	if res.stdout != "" {
		_ = enc.Encode(apiv1.ExecFrame{Type: "stdout", Data: []byte(res.stdout)})
	}
	if res.stderr != "" {
		_ = enc.Encode(apiv1.ExecFrame{Type: "stderr", Data: []byte(res.stderr)})
	}
	_ = enc.Encode(apiv1.ExecFrame{Type: "exit", ExitCode: res.code, Error: res.err, TimedOut: res.timedOut})
}

// execWS speaks the guest framing. Besides the fake shell's commands it
// knows interactive ones:
//
//	cat          echoes stdin frames until stdin_close
//	sh           an interactive shell: without a TTY it reads stdin to its
//	             end and exits 0; on a TTY it prints a prompt and ends only
//	             when the client goes, as a real one may miss the ^D that
//	             stdin_close becomes on a PTY
//	tty          prints the PTY size, waits for a resize and prints it
//	wait-signal  waits for a signal, prints it and exits 130
//	suspend-me   prints a line, then the session is suspended under it
//	             (an evict op, a snapshot): the stream ends without exit
func (s *Server) execWS(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	w.Header().Set(apiv1.HeaderSessionEpoch, strconv.FormatInt(s.findSession(id).Epoch, 10))
	s.mu.Unlock()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, msg, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var start apiv1.ExecStart
	if err := json.Unmarshal(msg, &start); err != nil || len(start.Argv) == 0 {
		_ = conn.Close(websocket.StatusPolicyViolation, "bad exec start")
		return
	}
	send := func(ch byte, data string) {
		if start.TTY {
			ch = apiv1.ChanStdout
		}
		_ = conn.Write(ctx, websocket.MessageBinary, append([]byte{ch}, data...))
	}
	control := func(c apiv1.ExecControl) {
		b, _ := json.Marshal(c)
		_ = conn.Write(ctx, websocket.MessageText, b)
	}
	control(apiv1.ExecControl{Type: "started", PID: 42})
	exit, ok := s.execProgram(ctx, conn, id, start, send)
	if !ok {
		return
	}
	control(exit)
	_ = conn.Close(websocket.StatusNormalClosure, "")
}

// execProgram runs start's program the way the fake guest knows it and
// says how it exited; false when the stream ends without an exit.
func (s *Server) execProgram(ctx context.Context, conn *websocket.Conn, id string, start apiv1.ExecStart, send func(byte, string)) (apiv1.ExecControl, bool) {
	exit := apiv1.ExecControl{Type: "exit"}
	switch start.Argv[0] {
	case "suspend-me":
		send(apiv1.ChanStdout, "partial output\n")
		s.suspendUnder(id)
		return exit, false // no exit: the machine is gone
	case "cat":
		for start.Stdin {
			typ, msg, err := conn.Read(ctx)
			if err != nil {
				return exit, false
			}
			if typ == websocket.MessageBinary && len(msg) > 0 && msg[0] == apiv1.ChanStdin {
				send(apiv1.ChanStdout, string(msg[1:]))
				continue
			}
			if ctl := decodeControl(msg); ctl.Type == "stdin_close" {
				break
			}
		}
	case "sh":
		if start.TTY {
			send(apiv1.ChanStdout, "# ")
			_, _ = waitControl(ctx, conn, "never")
			return exit, false
		}
		if start.Stdin {
			if _, ok := waitControl(ctx, conn, "stdin_close"); !ok {
				return exit, false
			}
		}
	case "tty":
		send(apiv1.ChanStdout, fmt.Sprintf("tty=%v rows=%d cols=%d\n", start.TTY, start.Rows, start.Cols))
		ctl, ok := waitControl(ctx, conn, "resize")
		if !ok {
			return exit, false
		}
		send(apiv1.ChanStdout, fmt.Sprintf("resize %d %d\n", ctl.Rows, ctl.Cols))
	case "wait-signal":
		ctl, ok := waitControl(ctx, conn, "signal")
		if !ok {
			return exit, false
		}
		send(apiv1.ChanStdout, "got "+ctl.Signal+"\n")
		exit.ExitCode = 130
	default:
		res := run(start.Argv, start.Env, start.Dir, nil)
		if res.stdout != "" {
			send(apiv1.ChanStdout, res.stdout)
		}
		if res.stderr != "" {
			send(apiv1.ChanStderr, res.stderr)
		}
		exit.ExitCode, exit.Error, exit.TimedOut = res.code, res.err, res.timedOut
	}
	return exit, true
}

func decodeControl(msg []byte) apiv1.ExecControl {
	var c apiv1.ExecControl
	_ = json.Unmarshal(msg, &c)
	return c
}

// waitControl reads messages until a control of type typ, ignoring stdin.
func waitControl(ctx context.Context, conn *websocket.Conn, typ string) (apiv1.ExecControl, bool) {
	for {
		mt, msg, err := conn.Read(ctx)
		if err != nil {
			return apiv1.ExecControl{}, false
		}
		if mt != websocket.MessageText {
			continue
		}
		if c := decodeControl(msg); c.Type == typ {
			return c, true
		}
	}
}

// streamEvents serves SSE: the backlog after Last-Event-ID (or ?after=),
// then live events while following; a terminal session ends the stream
// (with the end message if EndMessage is on).
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id string) {
	lastID := r.Header.Get(apiv1.HeaderLastEventID)
	after := r.URL.Query().Get("after")
	if lastID != "" {
		after = lastID
	}
	var seq int64
	if after != "" {
		var err error
		if seq, err = strconv.ParseInt(after, 10, 64); err != nil {
			writeErr(w, 400, "bad_request", "bad event id "+after)
			return
		}
	}
	follow := r.URL.Query().Get("follow") != "false"
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, lastID)
	drop, endMsg := s.drop, s.endMsg
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	fmt.Fprint(w, ": hello\n\n")
	sent := 0
	for {
		s.mu.Lock()
		evs := slices.Clone(s.events[id])
		changed := s.changed
		terminal := s.findSession(id).State == "completed" || s.findSession(id).State == "dead"
		s.mu.Unlock()
		for _, ev := range evs {
			if ev.Seq <= seq {
				continue
			}
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
			seq = ev.Seq
			sent++
			if follow && drop > 0 && sent >= drop {
				fl.Flush()
				return
			}
		}
		fl.Flush()
		if !follow {
			return
		}
		if terminal {
			if endMsg {
				fmt.Fprintf(w, "event: %s\ndata: {}\n\n", apiv1.EventStreamEnd)
				fl.Flush()
			}
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// suspendUnder suspends session id as a suspend op would, under a running
// command.
func (s *Server) suspendUnder(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	sess.Epoch++
	s.nextOp++
	s.ops[id] = append(s.ops[id], apiv1.Op{ID: fmt.Sprintf("op%d", s.nextOp+1), Kind: apiv1.OpSuspend, State: "succeeded", Epoch: sess.Epoch,
		Attempts: 1, CreatedAt: BaseTime(), UpdatedAt: BaseTime()})
	s.snapshotLocked(sess, "suspend")
	sess.State, sess.DesiredState, sess.HostID = "idle", "idle", ""
	s.addEventLocked(id, "state", map[string]string{"state": "idle"})
}
