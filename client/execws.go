package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/api/apiv1"
)

// ExecIO is the local side of an interactive exec.
type ExecIO struct {
	// Stdin, if non-nil, is sent to the command (ExecStart.Stdin is set);
	// its EOF closes the command's stdin. A Read that blocks when the
	// command exits is abandoned: that goroutine ends when Read returns.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil discards it.
	// With a TTY, all output arrives on Stdout.
	Stdout, Stderr io.Writer
	// Resize sends each (rows, cols) to the command's PTY.
	Resize <-chan [2]uint16
	// Signal sends each signal name (e.g. "SIGINT") to the command.
	Signal <-chan string
}

// ExecWS runs start.Argv in session id over the WebSocket exec route and
// returns the command's final "exit" control message (ExitCode, or Error
// and TimedOut). resize carries (rows, cols) for a PTY; it may be nil.
func (sc SessionClient) ExecWS(ctx context.Context, id string, start apiv1.ExecStart, stdin io.Reader, stdout, stderr io.Writer, resize <-chan [2]uint16) (apiv1.ExecControl, error) {
	return sc.ExecWSIO(ctx, id, start, ExecIO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Resize: resize})
}

// ExecWSIO is ExecWS with signal forwarding. A connection that ends
// without the exit message is ErrNoExit, an *ExecCutError when the
// session's op log says what took the session (a suspend, a delete).
func (sc SessionClient) ExecWSIO(ctx context.Context, id string, start apiv1.ExecStart, eio ExecIO) (apiv1.ExecControl, error) {
	conn, epoch, err := sc.c.dialWS(ctx, routePath(apiv1.RouteExecWS, id))
	if err != nil {
		return apiv1.ExecControl{}, err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(-1)

	start.Stdin = eio.Stdin != nil
	b, err := json.Marshal(start)
	if err != nil {
		return apiv1.ExecControl{}, fmt.Errorf("encode exec start: %w", err)
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return apiv1.ExecControl{}, fmt.Errorf("send exec start: %w", err)
	}

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { forwardControls(ctx, conn, eio.Resize, eio.Signal) })
	if eio.Stdin != nil {
		wg.Go(func() { forwardStdin(ctx, conn, eio.Stdin) })
	}
	exit, err := readExecWS(ctx, conn, eio.Stdout, eio.Stderr)
	cancel()
	wg.Wait()
	if err != nil {
		return exit, sc.explainNoExit(parent, id, epoch, err)
	}
	// The exit message is the end of the exchange; a close handshake would
	// only add a round trip through every hop.
	_ = conn.CloseNow()
	return exit, nil
}

// dialWS opens a WebSocket to path, turning a refused upgrade into
// *APIError; it returns the upgrade answer's apiv1.HeaderSessionEpoch.
func (c *Client) dialWS(ctx context.Context, path string) (*websocket.Conn, string, error) {
	u, err := c.endpoint(path, nil)
	if err != nil {
		return nil, "", err
	}
	hdr := http.Header{}
	c.authorize(hdr)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			body := []byte(nil)
			if resp.Body != nil {
				body, _ = io.ReadAll(resp.Body)
			}
			return nil, "", errorFromBody(resp.StatusCode, body)
		}
		return nil, "", c.wrapTransport("open exec WebSocket", err)
	}
	return conn, resp.Header.Get(apiv1.HeaderSessionEpoch), nil
}

// readExecWS copies output frames until the exit control message.
func readExecWS(ctx context.Context, conn *websocket.Conn, stdout, stderr io.Writer) (apiv1.ExecControl, error) {
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return apiv1.ExecControl{}, ctx.Err()
			}
			return apiv1.ExecControl{}, fmt.Errorf("%w: %w", ErrNoExit, err)
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 {
				continue
			}
			w := stdout
			if msg[0] == apiv1.ChanStderr {
				w = stderr
			} else if msg[0] != apiv1.ChanStdout {
				continue
			}
			if w != nil {
				if _, err := w.Write(msg[1:]); err != nil {
					return apiv1.ExecControl{}, fmt.Errorf("write output: %w", err)
				}
			}
			continue
		}
		var ctl apiv1.ExecControl
		if err := json.Unmarshal(msg, &ctl); err != nil {
			return apiv1.ExecControl{}, fmt.Errorf("decode exec control message: %w", err)
		}
		if ctl.Type == "exit" {
			return ctl, nil
		}
	}
}

func forwardControls(ctx context.Context, conn *websocket.Conn, resize <-chan [2]uint16, signal <-chan string) {
	for {
		var ctl apiv1.ExecControl
		select {
		case <-ctx.Done():
			return
		case rc, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			ctl = apiv1.ExecControl{Type: "resize", Rows: rc[0], Cols: rc[1]}
		case sig, ok := <-signal:
			if !ok {
				signal = nil
				continue
			}
			ctl = apiv1.ExecControl{Type: "signal", Signal: sig}
		}
		if writeControl(ctx, conn, ctl) != nil {
			return
		}
	}
}

func writeControl(ctx context.Context, conn *websocket.Conn, ctl apiv1.ExecControl) error {
	b, err := json.Marshal(ctl)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

// forwardStdin sends stdin as channel-0 frames, then stdin_close. Reads run
// in their own goroutine, which is not waited for: a Read on a terminal
// cannot be interrupted.
func forwardStdin(ctx context.Context, conn *websocket.Conn, stdin io.Reader) {
	type chunk struct {
		b   []byte
		err error
	}
	chunks := make(chan chunk)
	go func() {
		for {
			buf := make([]byte, 32<<10)
			n, err := stdin.Read(buf)
			select {
			case chunks <- chunk{buf[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ch := <-chunks:
			if len(ch.b) > 0 {
				frame := append([]byte{apiv1.ChanStdin}, ch.b...)
				if conn.Write(ctx, websocket.MessageBinary, frame) != nil {
					return
				}
			}
			if ch.err != nil { // EOF, or a read error: either way stdin ends here
				_ = writeControl(ctx, conn, apiv1.ExecControl{Type: "stdin_close"})
				return
			}
		}
	}
}
