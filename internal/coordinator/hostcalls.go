package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// hostCallTimeout bounds one command to a host; a boot under software
// emulation can take several seconds.
const hostCallTimeout = 2 * time.Minute

// HostError is a refusal answered by a host.
type HostError struct {
	Status int
	Code   string
	Msg    string
	Tail   string // output tail of a failed warm-up
}

func (e *HostError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("host answered %d %s: %s", e.Status, e.Code, e.Msg)
	}
	return fmt.Sprintf("host answered %d: %s", e.Status, e.Msg)
}

// hostCall sends one JSON command to a host carrying the session epoch. A
// stale_epoch refusal is returned wrapping store.ErrStaleEpoch.
func (c *Coordinator) hostCall(ctx context.Context, hostID, method, path string, epoch int64, in, out any) error {
	return c.hostCallWithin(ctx, hostCallTimeout, hostID, method, path, epoch, in, out)
}

// hostCallWithin is hostCall with its own time limit.
func (c *Coordinator) hostCallWithin(ctx context.Context, limit time.Duration, hostID, method, path string, epoch int64, in, out any) error {
	rt, err := c.hosts.Transport(ctx, hostID)
	if err != nil {
		return fmt.Errorf("reach host %s: %w", hostID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://host"+path, body)
	if err != nil {
		return fmt.Errorf("build %s %s: %w", method, path, err)
	}
	req.Header.Set(hostlink.HeaderEpoch, strconv.FormatInt(epoch, 10))
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on host %s: %w", method, path, hostID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var eb hostlink.ErrorBody
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(raw))
		}
		herr := &HostError{Status: resp.StatusCode, Code: eb.Code, Msg: eb.Error, Tail: eb.OutputTail}
		if eb.Code == "stale_epoch" {
			return fmt.Errorf("%s %s on host %s: %w: %w", method, path, hostID, store.ErrStaleEpoch, herr)
		}
		return fmt.Errorf("%s %s on host %s: %w", method, path, hostID, herr)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("decode answer to %s %s: %w", method, path, err)
		}
	}
	return nil
}
