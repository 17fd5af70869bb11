package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// ExecResult is what a command run in a guest left.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
	Error          string // the guest could not run it, or it timed out
}

// guestDo sends one request to a session's guest daemon (resuming the
// session first when it is Idle) and returns the answer when it is 2xx.
func (c *Coordinator) guestDo(ctx context.Context, sessionID, method, guestPath string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	t, err := c.Guest(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	u := "http://host" + t.PathPrefix + guestPath
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("build guest request: %w", err)
	}
	req.Header = t.Headers()
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := t.Transport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s in session %s: %w", method, guestPath, sessionID, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		var eb guestapi.ErrorBody
		if json.Unmarshal(msg, &eb) == nil && eb.Error != "" {
			msg = []byte(eb.Error)
		}
		err := fmt.Errorf("%s %s in session %s: %s: %s", method, guestPath, sessionID, resp.Status, strings.TrimSpace(string(msg)))
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nil, err
	}
	return resp, nil
}

// GuestExec runs argv in a session's guest to completion, with stdin, and
// collects its output (each stream bounded by limit bytes; what is over is
// dropped).
func (c *Coordinator) GuestExec(ctx context.Context, sessionID domain.SessionID, req guestapi.ExecRequest, limit int) (ExecResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("encode exec request: %w", err)
	}
	resp, err := c.guestDo(ctx, sessionID, http.MethodPost, guestapi.PathExecRun, nil, bytes.NewReader(body), "application/json")
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	var res ExecResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var f guestapi.StreamFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return res, fmt.Errorf("decode exec frame: %w", err)
		}
		switch f.Type {
		case "stdout":
			res.Stdout = appendBounded(res.Stdout, f.Data, limit)
		case "stderr":
			res.Stderr = appendBounded(res.Stderr, f.Data, limit)
		case "exit":
			res.ExitCode, res.Error = f.ExitCode, f.Error
			return res, nil
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("read exec output: %w", err)
	}
	return res, fmt.Errorf("exec in session %s: the output ended without an exit frame", sessionID)
}

func appendBounded(b, data []byte, limit int) []byte {
	if room := limit - len(b); room < len(data) {
		data = data[:max(room, 0)]
	}
	return append(b, data...)
}

// GuestPutFile uploads body as path in a session's guest.
func (c *Coordinator) GuestPutFile(ctx context.Context, sessionID, path string, mode string, body io.Reader) error {
	q := url.Values{"path": {path}}
	if mode != "" {
		q.Set("mode", mode)
	}
	resp, err := c.guestDo(ctx, sessionID, http.MethodPut, guestapi.PathFiles, q, body, "application/octet-stream")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.Body.Close()
}
