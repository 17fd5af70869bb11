package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
)

// CreateSession creates a session. With wait it returns when the session is
// active (or failed to start); without, at once.
func (c *Client) CreateSession(ctx context.Context, req apiv1.CreateSessionRequest, wait bool) (apiv1.Session, error) {
	var s apiv1.Session
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateSession, ""), waitQuery(wait), req, &s)
	return s, err
}

// SessionFilter narrows ListSessions; empty fields match everything.
type SessionFilter struct {
	State  string
	HostID string
}

// ListSessions lists sessions.
func (c *Client) ListSessions(ctx context.Context, f SessionFilter) ([]apiv1.Session, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.HostID != "" {
		q.Set("host", f.HostID)
	}
	var l apiv1.SessionList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListSessions, ""), q, nil, &l)
	return l.Sessions, err
}

// GetSession returns a session with its op log.
func (c *Client) GetSession(ctx context.Context, id string) (apiv1.Session, error) {
	var s apiv1.Session
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetSession, id), nil, nil, &s)
	return s, err
}

// DeleteSession deletes a session. With wait it returns when the VM is gone.
func (c *Client) DeleteSession(ctx context.Context, id string, wait bool) error {
	return c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteSession, id), waitQuery(wait), nil, nil)
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
// *ExecFailedError and the code is what the server reported.
func (c *Client) Exec(ctx context.Context, id string, req apiv1.ExecRequest, stdout, stderr io.Writer) (int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return -1, fmt.Errorf("encode exec request: %w", err)
	}
	resp, err := c.send(ctx, http.MethodPost, routePath(apiv1.RouteExec, id), nil,
		bytes.NewReader(b), "application/json", http.Header{"Accept": {"application/x-ndjson"}})
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	code, err := readExecFrames(resp.Body, stdout, stderr)
	// Drain what follows the exit frame so the connection is reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	return code, err
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

// GetFile downloads path from session id into w.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, routePath(apiv1.RouteFileGet, id), url.Values{"path": {path}}, nil, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("download %s: %w", path, err)
	}
	return nil
}

// PutFile uploads r to path in session id. A zero mode leaves the server's
// default (0644).
func (c *Client) PutFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	resp, err := c.send(ctx, http.MethodPut, routePath(apiv1.RouteFilePut, id), q, r, "application/octet-stream", nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// ListFiles lists the directory path in session id.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]apiv1.FileInfo, error) {
	var l []apiv1.FileInfo
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteFileList, id), url.Values{"path": {path}}, nil, &l)
	return l, err
}

// StatFile describes path in session id.
func (c *Client) StatFile(ctx context.Context, id, path string) (apiv1.FileInfo, error) {
	var fi apiv1.FileInfo
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteFileStat, id), url.Values{"path": {path}}, nil, &fi)
	return fi, err
}
