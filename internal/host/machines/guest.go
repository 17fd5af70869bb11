package machines

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// guestCallLimit bounds one call the agent itself makes to a guest daemon
// (sync flushes every filesystem, so it may take a while).
const guestCallLimit = 2 * time.Minute

// Call sends one JSON request to the machine's guest daemon and decodes a
// 2xx answer into out (if not nil).
func (mc *Machine) Call(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, guestCallLimit)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode guest %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://guest"+path, body)
	if err != nil {
		return fmt.Errorf("build guest %s %s: %w", method, path, err)
	}
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: mc.transport}).Do(req)
	if err != nil {
		return fmt.Errorf("guest %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb guestapi.ErrorBody
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(raw))
		}
		return fmt.Errorf("guest %s %s: %s: %s", method, path, resp.Status, eb.Error)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("decode guest %s %s answer: %w", method, path, err)
	}
	return nil
}
