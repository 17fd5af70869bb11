package guestapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// ExecResult is what a command run to completion left.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
	Error          string // the guest could not run it, or it timed out
}

// maxFrame bounds one NDJSON frame of an exec answer.
const maxFrame = 16 << 20

// Run runs req to completion over PathExecRun and collects its output,
// each stream bounded by limit bytes (what is over is dropped).
func (c *Client) Run(ctx context.Context, req ExecRequest, limit int) (ExecResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("encode exec request: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, PathExecRun, nil, bytes.NewReader(body))
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec %s: %w", argv0(req.Argv), err)
	}
	defer resp.Body.Close()
	var res ExecResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxFrame)
	for sc.Scan() {
		var f StreamFrame
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
	return res, fmt.Errorf("exec %s: the output ended without an exit frame", argv0(req.Argv))
}

func argv0(argv []string) string {
	if len(argv) == 0 {
		return "(no command)"
	}
	return argv[0]
}

func appendBounded(b, data []byte, limit int) []byte {
	if room := limit - len(b); room < len(data) {
		data = data[:max(room, 0)]
	}
	return append(b, data...)
}
