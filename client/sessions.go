package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/engrams/engrams/api/apiv1"
)

// SessionClient calls the session routes: create, list, get and delete,
// exec, events, snapshots and the outbox. Client.Sessions returns one.
type SessionClient struct{ c *Client }

// Sessions returns the client of the session routes.
func (c *Client) Sessions() SessionClient { return SessionClient{c} }

// Create creates a session. With wait it returns when the session is
// active (or failed to start); without, at once.
func (sc SessionClient) Create(ctx context.Context, req apiv1.CreateSessionRequest, wait bool) (apiv1.Session, error) {
	var s apiv1.Session
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateSession, ""), waitQuery(wait), req, &s)
	return s, err
}

// SessionFilter narrows SessionClient.List; empty fields match everything.
type SessionFilter struct {
	State  string
	HostID string
}

// List lists sessions.
func (sc SessionClient) List(ctx context.Context, f SessionFilter) ([]apiv1.Session, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.HostID != "" {
		q.Set("host", f.HostID)
	}
	return listAll(ctx, sc.c, routePath(apiv1.RouteListSessions, ""), q, func(l apiv1.SessionList) ([]apiv1.Session, string) { return l.Items, l.NextCursor })
}

// Get returns a session with its op log.
func (sc SessionClient) Get(ctx context.Context, id string) (apiv1.Session, error) {
	var s apiv1.Session
	err := sc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetSession, id), nil, nil, &s)
	return s, err
}

// Delete deletes a session. With wait it returns when the VM is gone.
func (sc SessionClient) Delete(ctx context.Context, id string, wait bool) error {
	return sc.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteSession, id), waitQuery(wait), nil, nil)
}

// ErrNoExit means an exec stream ended without the command's exit status:
// the connection or the VM was lost.
var ErrNoExit = errors.New("exec stream ended without an exit status")

// ExecFailedError is an exit frame that carries an error: the command could
// not start, or it timed out.
type ExecFailedError struct {
	Message  string
	TimedOut bool
}

func (e *ExecFailedError) Error() string {
	if e.TimedOut {
		return "command timed out: " + e.Message
	}
	return "command failed: " + e.Message
}

// Exec runs req.Argv in session id without a terminal, copying its output to
// stdout and stderr (either may be nil to discard), and returns its exit
// code. When the command could not start or timed out, the error is an
// *ExecFailedError and the code is what the server reported. A stream that
// ends without the exit status is ErrNoExit, an *ExecCutError when the
// session's op log says what took the session (a suspend, a delete).
func (sc SessionClient) Exec(ctx context.Context, id string, req apiv1.ExecRequest, stdout, stderr io.Writer) (int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return -1, fmt.Errorf("encode exec request: %w", err)
	}
	resp, err := sc.c.send(ctx, http.MethodPost, routePath(apiv1.RouteExec, id), nil,
		bytes.NewReader(b), "application/json", http.Header{"Accept": {"application/x-ndjson"}})
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	code, err := readExecFrames(resp.Body, stdout, stderr)
	// Drain what follows the exit frame so the connection is reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	return code, sc.explainNoExit(ctx, id, resp.Header.Get(apiv1.HeaderSessionEpoch), err)
}

func readExecFrames(r io.Reader, stdout, stderr io.Writer) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var f apiv1.ExecFrame
		if err := json.Unmarshal(line, &f); err != nil {
			return -1, fmt.Errorf("decode exec frame: %w", err)
		}
		switch f.Type {
		case "stdout", "stderr":
			w := stdout
			if f.Type == "stderr" {
				w = stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(f.Data); err != nil {
				return -1, fmt.Errorf("write %s: %w", f.Type, err)
			}
		case "exit":
			if f.Error != "" {
				return f.ExitCode, &ExecFailedError{Message: f.Error, TimedOut: f.TimedOut}
			}
			return f.ExitCode, nil
		}
	}
	if err := sc.Err(); err != nil {
		return -1, fmt.Errorf("read exec stream: %w", err)
	}
	return -1, ErrNoExit
}
