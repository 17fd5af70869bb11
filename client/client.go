package client

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
	"strings"
	"syscall"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// Client calls the public API of one coordinator, through one sub-client
// per resource: Sessions, Files, Images, Tasks, Hosts, Tokens, Harnesses,
// Secrets and Profiles. It and its sub-clients are safe for concurrent use.
type Client struct {
	base      *url.URL
	baseErr   error
	token     string
	hc        *http.Client
	userAgent string
	backoff   time.Duration // first event stream reconnect delay; doubles up to maxBackoff
	retries   int           // event stream reconnect attempts in a row before giving up
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a client without a timeout,
// since exec and event streams run long; bound calls with ctx).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithReconnect sets how SessionClient.Events and TaskClient.Events
// reconnect a dropped stream while following: the first delay (doubling up
// to 5s) and how many failed attempts in a row end the call with the last
// error.
func WithReconnect(first time.Duration, attempts int) Option {
	return func(c *Client) { c.backoff, c.retries = first, attempts }
}

const maxBackoff = 5 * time.Second

// New returns a client for the API at baseURL (e.g. "http://127.0.0.1:7700")
// that sends token as a bearer token. A malformed baseURL is reported by
// every call.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		token:     token,
		hc:        &http.Client{},
		userAgent: "engrams-client",
		backoff:   250 * time.Millisecond,
		retries:   8,
	}
	c.base, c.baseErr = parseBase(baseURL)
	for _, o := range opts {
		o(c)
	}
	return c
}

func parseBase(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("no API URL: run `engrams dev`, or set --url or ENGRAMS_URL")
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return nil, fmt.Errorf("parse API URL %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API URL %q: want http://HOST[:PORT] or https://HOST[:PORT]", raw)
	}
	return u, nil
}

// BaseURL returns the API URL the client was made with, without a trailing
// slash ("" when it was malformed).
func (c *Client) BaseURL() string {
	if c.base == nil {
		return ""
	}
	return c.base.String()
}

// APIError is a non-2xx answer.
type APIError struct {
	Status  int    // HTTP status
	Code    string // apiv1.Error.Code, e.g. "not_found"
	Message string // apiv1.Error.Error
	// RetryAfter is the answer's Retry-After (0 without one), e.g. of a
	// 503 no_capacity: no host has room for the session yet.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// Error codes of apiv1.Error.Code, for HasCode.
const (
	CodeBadRequest   = apiv1.CodeBadRequest
	CodeUnauthorized = apiv1.CodeUnauthorized
	CodeNotFound     = apiv1.CodeNotFound
	CodeConflict     = apiv1.CodeConflict
	CodeTooLarge     = apiv1.CodeTooLarge
	CodeUnavailable  = apiv1.CodeUnavailable
	CodeNoCapacity   = apiv1.CodeNoCapacity // no host has room; retry after APIError.RetryAfter
	CodeTimeout      = apiv1.CodeTimeout    // a server-side wait ran out; the operation goes on
	CodeInternal     = apiv1.CodeInternal
)

// HasCode reports whether err is an *APIError with the given code.
func HasCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// IsNotFound reports whether err is a 404 / not_found answer.
func IsNotFound(err error) bool { return HasCode(err, CodeNotFound) }

// IsUnauthorized reports whether err is a 401 / unauthorized answer.
func IsUnauthorized(err error) bool { return HasCode(err, CodeUnauthorized) }

// IsConflict reports whether err is a 409 / conflict answer.
func IsConflict(err error) bool { return HasCode(err, CodeConflict) }

// IsUnavailable reports whether err is a 503 / unavailable answer.
func IsUnavailable(err error) bool { return HasCode(err, CodeUnavailable) }

// NoCapacity reports whether err is a 503 / no_capacity answer (every host
// that could run the session is full and nothing could be evicted in
// time), and how long to wait before retrying.
func NoCapacity(err error) (retryAfter time.Duration, ok bool) {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeNoCapacity {
		return 0, false
	}
	return ae.RetryAfter, true
}

// UnreachableError is a failure to reach the API at all (connection refused,
// unknown host). Its message says what to do.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the engrams API at %s: %v (is `engrams dev` running? set --url or ENGRAMS_URL)", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// wrapTransport turns dial failures into *UnreachableError.
func (c *Client) wrapTransport(action string, err error) error {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dnsErr) ||
		(errors.As(err, &opErr) && opErr.Op == "dial") {
		return &UnreachableError{URL: c.BaseURL(), Err: innermost(err)}
	}
	return fmt.Errorf("%s: %w", action, err)
}

func innermost(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr
	}
	return err
}

// codeFor names the code of a status when the body did not.
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusNotFound, http.StatusForbidden:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// decodeError reads a non-2xx answer into an *APIError.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := errorFromBody(resp.StatusCode, body)
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		ae.RetryAfter = time.Duration(secs) * time.Second
	}
	return ae
}

func errorFromBody(status int, body []byte) *APIError {
	ae := &APIError{Status: status}
	var e apiv1.Error
	if json.Unmarshal(body, &e) == nil && (e.Error != "" || e.Code != "") {
		ae.Code, ae.Message = e.Code, e.Error
	} else {
		ae.Message = strings.TrimSpace(string(body))
		if len(ae.Message) > 200 {
			ae.Message = ae.Message[:200] + "…"
		}
	}
	if ae.Code == "" {
		ae.Code = codeFor(status)
	}
	if ae.Message == "" {
		ae.Message = http.StatusText(status)
	}
	return ae
}

// endpoint builds the URL of path (escaped, starting with "/") plus query.
func (c *Client) endpoint(path string, q url.Values) (string, error) {
	if c.baseErr != nil {
		return "", c.baseErr
	}
	u := *c.base
	raw := strings.TrimRight(c.base.EscapedPath(), "/") + path
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("build URL for %s: %w", path, err)
	}
	u.Path, u.RawPath = unescaped, raw
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// send makes one request and returns the response when it is 2xx; other
// answers become *APIError. The caller closes the body.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string, hdr http.Header) (*http.Response, error) {
	action := method + " " + path
	u, err := c.endpoint(path, q)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c.authorize(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.wrapTransport(action, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	h.Set("User-Agent", c.userAgent)
}

// call sends in (JSON, if non-nil) and decodes a JSON answer into out (if
// non-nil and the answer has a body).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.send(ctx, method, path, q, body, ct, http.Header{"Accept": {"application/json"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// routePath turns an apiv1 route pattern into a path, filling its
// wildcards ({id}, {name}, ...) with ids, in order.
func routePath(route string, ids ...string) string {
	_, p, _ := strings.Cut(route, " ")
	var b strings.Builder
	for _, id := range ids {
		i := strings.IndexByte(p, '{')
		j := strings.IndexByte(p, '}')
		if i < 0 || j < i {
			break
		}
		b.WriteString(p[:i] + url.PathEscape(id))
		p = p[j+1:]
	}
	return b.String() + p
}

func waitQuery(wait bool) url.Values {
	if wait {
		return nil
	}
	return url.Values{"wait": {"false"}}
}
