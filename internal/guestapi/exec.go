package guestapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// stdinChunk is the largest stdin frame payload a client sends.
const stdinChunk = 32 << 10

// Process is one running exec stream. Wait must be called (once) to read its
// output and exit; Write, CloseStdin, Resize and Signal may be called
// concurrently with it.
type Process struct {
	conn  *websocket.Conn
	ctx   context.Context
	pid   int
	early *Control // an exit that arrived instead of "started"
}

// Start starts a command in the guest and returns once it runs (or could not
// start: then Wait returns the exit at once). Set start.Stdin to send stdin.
// The command is bound to ctx: cancelling it kills the command.
func (c *Client) Start(ctx context.Context, start ExecStart) (*Process, error) {
	conn, resp, err := websocket.Dial(ctx, "ws://guest"+PathExec, &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: versionHeader(),
	})
	if err != nil {
		if resp != nil && resp.StatusCode != 101 && resp.StatusCode != 0 {
			return nil, fmt.Errorf("exec %v: %w", start.Argv, errorFromResponse(resp))
		}
		return nil, fmt.Errorf("exec %v: %w", start.Argv, err)
	}
	conn.SetReadLimit(1 << 20)
	p := &Process{conn: conn, ctx: ctx}
	msg, err := json.Marshal(start)
	if err == nil {
		err = conn.Write(ctx, websocket.MessageText, msg)
	}
	if err != nil {
		_ = conn.CloseNow()
		return nil, fmt.Errorf("exec %v: send start: %w", start.Argv, err)
	}
	typ, msg, err := conn.Read(ctx)
	if err != nil {
		_ = conn.CloseNow()
		return nil, fmt.Errorf("exec %v: read started: %w", start.Argv, err)
	}
	var ctl Control
	if typ != websocket.MessageText || json.Unmarshal(msg, &ctl) != nil {
		_ = conn.CloseNow()
		return nil, fmt.Errorf("exec %v: protocol error: expected a started or exit message", start.Argv)
	}
	switch ctl.Type {
	case "started":
		p.pid = ctl.PID
	case "exit":
		p.early = &ctl
	default:
		_ = conn.CloseNow()
		return nil, fmt.Errorf("exec %v: protocol error: unexpected %q message", start.Argv, ctl.Type)
	}
	return p, nil
}

// PID is the command's process id in the guest (0 if it did not start).
func (p *Process) PID() int { return p.pid }

// Write sends stdin data.
func (p *Process) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), stdinChunk)
		frame := make([]byte, 1+k)
		frame[0] = ChanStdin
		copy(frame[1:], b[:k])
		if err := p.conn.Write(p.ctx, websocket.MessageBinary, frame); err != nil {
			return n, fmt.Errorf("write stdin: %w", err)
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

func (p *Process) control(c Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := p.conn.Write(p.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("send %s: %w", c.Type, err)
	}
	return nil
}

// CloseStdin ends the command's stdin (sends ^D on a terminal).
func (p *Process) CloseStdin() error { return p.control(Control{Type: "stdin_close"}) }

// Resize changes the terminal size of a TTY command.
func (p *Process) Resize(rows, cols uint16) error {
	return p.control(Control{Type: "resize", Rows: rows, Cols: cols})
}

// Signal sends a signal ("TERM", "SIGINT", "9") to the command's process group.
func (p *Process) Signal(sig string) error { return p.control(Control{Type: "signal", Signal: sig}) }

// Wait copies output to stdout and stderr (nil discards) as it arrives and
// returns the exit message once all output was delivered. It closes the
// stream. An error means the stream broke or a writer failed; the command
// is then killed.
func (p *Process) Wait(stdout, stderr io.Writer) (Control, error) {
	defer p.conn.CloseNow()
	if p.early != nil {
		return *p.early, nil
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		typ, msg, err := p.conn.Read(p.ctx)
		if err != nil {
			if ctxErr := p.ctx.Err(); ctxErr != nil {
				err = ctxErr
			}
			return Control{}, fmt.Errorf("exec stream: %w", err)
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 {
				continue
			}
			w := stdout
			if msg[0] == ChanStderr {
				w = stderr
			}
			if _, err := w.Write(msg[1:]); err != nil {
				return Control{}, fmt.Errorf("copy exec output: %w", err)
			}
			continue
		}
		var ctl Control
		if err := json.Unmarshal(msg, &ctl); err != nil {
			return Control{}, fmt.Errorf("exec stream: bad control message: %w", err)
		}
		if ctl.Type == "exit" {
			return ctl, nil
		}
	}
}

// Close ends the stream at once; a command still running is killed.
func (p *Process) Close() error { return p.conn.CloseNow() }

// Exec runs a command to completion: stdin (nil: none) is streamed to it and
// closed at EOF, output is copied to stdout and stderr as it arrives. It
// returns the exit message; a command that failed to start or timed out is
// reported there (Error, TimedOut), not as an error. Exec does not wait for a
// stdin Read that is still blocked when the command exits.
func (c *Client) Exec(ctx context.Context, start ExecStart, stdin io.Reader, stdout, stderr io.Writer) (Control, error) {
	start.Stdin = stdin != nil
	p, err := c.Start(ctx, start)
	if err != nil {
		return Control{}, err
	}
	var feed *stdinFeeder
	if stdin != nil && p.early == nil {
		feed = &stdinFeeder{p: p, r: stdin, done: make(chan struct{})}
		go feed.run()
	}
	exit, err := p.Wait(stdout, stderr)
	_ = p.Close()
	if feed != nil {
		feed.stop()
	}
	return exit, err
}

// stdinFeeder copies a reader to a Process's stdin.
type stdinFeeder struct {
	p    *Process
	r    io.Reader
	done chan struct{}

	mu      sync.Mutex
	reading bool
	stopped bool
}

func (f *stdinFeeder) run() {
	defer close(f.done)
	buf := make([]byte, stdinChunk)
	for {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return
		}
		f.reading = true
		f.mu.Unlock()
		n, rerr := f.r.Read(buf)
		f.mu.Lock()
		f.reading = false
		f.mu.Unlock()
		if n > 0 {
			if _, err := f.p.Write(buf[:n]); err != nil {
				return
			}
		}
		if rerr != nil { // EOF or a broken reader: either way stdin ends
			_ = f.p.CloseStdin()
			return
		}
	}
}

// stop joins the feeder unless it is blocked reading stdin.
func (f *stdinFeeder) stop() {
	f.mu.Lock()
	f.stopped = true
	reading := f.reading
	f.mu.Unlock()
	if !reading {
		<-f.done
	}
}
