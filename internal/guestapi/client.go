package guestapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Error categories callers branch on (errors.Is on an *Error).
var (
	ErrNotFound        = errors.New("guest: not found")
	ErrBadRequest      = errors.New("guest: bad request")
	ErrVersionMismatch = errors.New("guest: API version mismatch")
	// ErrUnavailable: the guest, or the host before it, cannot take the
	// request now (a paused machine, a daemon shutting down): nothing ran,
	// and it may be asked again.
	ErrUnavailable = errors.New("guest: unavailable")
)

// Error is a non-2xx answer of the guest daemon.
type Error struct {
	Status        int    // HTTP status
	Message       string // ErrorBody.Error, or the status text
	DaemonVersion string // the daemon's HeaderVersion, if it sent one
}

func (e *Error) Error() string {
	return fmt.Sprintf("guest daemon: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is maps the status to the exported categories.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest
	case ErrVersionMismatch:
		return e.DaemonVersion != "" && e.DaemonVersion != strconv.Itoa(Version)
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

// Client speaks the guest API over streams from a dial function (a Unix
// socket, a vsock connection, a Mux stream). It is safe for concurrent use.
type Client struct {
	hc     *http.Client
	tr     *http.Transport // nil for a route client
	prefix string          // path prefix of every request ("" for a direct client)
	header http.Header     // sent with every request besides HeaderVersion
}

// baseURL is the authority of every request; the dial function decides
// where requests really go.
const baseURL = "http://guest"

// NewClient returns a Client whose connections come from dial.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:        8,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}, tr: tr}
}

// NewRouteClient returns a Client whose requests go through rt to prefix +
// the guest API path, each carrying header: the coordinator reaches a guest
// through its host this way (hostlink.GuestRoute).
func NewRouteClient(rt http.RoundTripper, prefix string, header http.Header) *Client {
	return &Client{hc: &http.Client{Transport: rt}, prefix: prefix, header: header}
}

// Close releases idle connections.
func (c *Client) Close() {
	if c.tr != nil {
		c.tr.CloseIdleConnections()
	}
}

func versionHeader() http.Header {
	return http.Header{HeaderVersion: []string{strconv.Itoa(Version)}}
}

// do sends one request and returns the response of a 2xx answer; any other
// answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Response, error) {
	u := baseURL + c.prefix + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header = versionHeader()
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		if v := resp.Header.Get(HeaderVersion); v != "" && v != strconv.Itoa(Version) {
			resp.Body.Close()
			return nil, &Error{Status: resp.StatusCode, Message: "daemon speaks version " + v, DaemonVersion: v}
		}
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, errorFromResponse(resp)
}

func errorFromResponse(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, DaemonVersion: resp.Header.Get(HeaderVersion)}
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			e.Message = eb.Error
		} else {
			e.Message = string(b)
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// getJSON decodes a 2xx answer of at most MaxAnswerBytes (a listing's:
// MaxFileListBytes) into v.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limit := int64(MaxAnswerBytes)
	if path == PathFileList {
		limit = MaxFileListBytes
	}
	if err := json.NewDecoder(LimitReader(resp.Body, limit)).Decode(v); err != nil {
		return fmt.Errorf("decode %s answer: %w", path, err)
	}
	return nil
}

// Ready asks whether the daemon answers, and about the guest.
func (c *Client) Ready(ctx context.Context) (Ready, error) {
	var r Ready
	if err := c.getJSON(ctx, PathReady, nil, &r); err != nil {
		return Ready{}, fmt.Errorf("guest ready: %w", err)
	}
	return r, nil
}

// Upload writes r to the absolute path in the guest atomically, creating
// parent directories; mode is the file's permission bits.
func (c *Client) Upload(ctx context.Context, path string, mode uint32, r io.Reader) error {
	q := url.Values{"path": {path}, "mode": {fmt.Sprintf("%04o", mode)}}
	resp, err := c.do(ctx, http.MethodPut, PathFiles, q, r)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Download streams the guest file at the absolute path. Close the reader.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, PathFiles, url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", path, err)
	}
	return resp.Body, nil
}

// List returns the entries of the guest directory at the absolute path,
// sorted by name.
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	var out []FileInfo
	if err := c.getJSON(ctx, PathFileList, url.Values{"path": {path}}, &out); err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	return out, nil
}

// Stat describes the guest file at the absolute path.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	if err := c.getJSON(ctx, PathFileStat, url.Values{"path": {path}}, &fi); err != nil {
		return FileInfo{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fi, nil
}

// Sync asks the guest to flush every filesystem to its disk (sync(2)),
// the quiesce step before a snapshot.
func (c *Client) Sync(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodPost, PathSync, nil, nil)
	if err != nil {
		return fmt.Errorf("guest sync: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Outbox delivers entries (ascending seqs) and returns the guest's applied
// seq afterwards: entries at or below it were applied exactly once in this
// guest state; the first entry above it was not applied (a gap).
func (c *Client) Outbox(ctx context.Context, entries []OutboxEntry) (OutboxState, error) {
	body, err := json.Marshal(OutboxApply{Entries: entries})
	if err != nil {
		return OutboxState{}, fmt.Errorf("guest outbox apply: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, PathOutbox, nil, bytes.NewReader(body))
	if err != nil {
		return OutboxState{}, fmt.Errorf("guest outbox apply: %w", err)
	}
	defer resp.Body.Close()
	var st OutboxState
	if err := json.NewDecoder(LimitReader(resp.Body, MaxAnswerBytes)).Decode(&st); err != nil {
		return OutboxState{}, fmt.Errorf("guest outbox apply: decode answer: %w", err)
	}
	return st, nil
}

// OutboxState returns the guest's applied outbox seq.
func (c *Client) OutboxState(ctx context.Context) (OutboxState, error) {
	var st OutboxState
	if err := c.getJSON(ctx, PathOutbox, nil, &st); err != nil {
		return OutboxState{}, fmt.Errorf("guest outbox state: %w", err)
	}
	return st, nil
}
