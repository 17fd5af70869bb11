package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
)

// requestLimit bounds one post to the coordinator.
const requestLimit = 30 * time.Second

// coordLink is the registered coordinator link as the agent's parts use
// it: its client (nil while there is none) and posts over it.
type coordLink struct {
	client atomic.Pointer[http.Client]
	conn   atomic.Pointer[hostlink.Conn]
}

// Client is the registered link's client; nil while there is none.
func (l *coordLink) Client() *http.Client { return l.client.Load() }

func (l *coordLink) set(c *hostlink.Conn) {
	l.conn.Store(c)
	l.client.Store(c.HTTPClient())
}

// clear forgets c unless a newer link replaced it.
func (l *coordLink) clear(c *hostlink.Conn) {
	l.client.CompareAndSwap(c.HTTPClient(), nil)
	l.conn.CompareAndSwap(c, nil)
}

// dialBroker hands one of sid's guest TLS connections to the
// coordinator's credential broker (hostlink.DialBroker) under the highest
// epoch a command brought for sid.
func (l *coordLink) dialBroker(ctx context.Context, epochs interface{ HighestEpoch(string) (int64, error) }, sid, hostPort string) (net.Conn, error) {
	c := l.conn.Load()
	if c == nil {
		return nil, errors.New("no link to the coordinator")
	}
	epoch, err := epochs.HighestEpoch(sid)
	if err != nil {
		return nil, fmt.Errorf("broker for %s: %w", sid, err)
	}
	return hostlink.DialBroker(ctx, c.OpenStream, sid, epoch, hostPort)
}

// Post sends in as JSON to path on the coordinator and decodes its 2xx
// answer into out (nil: discarded); a refusal is a *postError.
func (l *coordLink) Post(ctx context.Context, client *http.Client, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, requestLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://coordinator"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read %s answer: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		pe := &postError{path: path, status: resp.Status, code: resp.StatusCode}
		var eb hostlink.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			pe.msg = eb.Error
		}
		pe.refusal = hostlink.RefusalOf(resp.StatusCode, resp.Header, eb)
		return pe
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s answer: %w", path, err)
	}
	return nil
}

// postError is a coordinator's refusal of a post, with its HTTP status.
type postError struct {
	path, status, msg string
	code              int
	refusal           *hostlink.Refusal // the coordinator refused this link (token, host or hold)
}

func (e *postError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("post %s: %s", e.path, e.status)
	}
	return fmt.Sprintf("post %s: %s: %s", e.path, e.status, e.msg)
}

// StatusCode is the HTTP status of the refusal.
func (e *postError) StatusCode() int { return e.code }

// Unwrap is the link refusal, so errors.Is matches its category.
func (e *postError) Unwrap() error {
	if e.refusal == nil {
		return nil
	}
	return e.refusal
}
