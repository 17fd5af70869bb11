package hostlink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Transports reaches a host wherever its link is held (this replica or a
// peer); Router implements it.
type Transports interface {
	Transport(ctx context.Context, hostID domain.HostID) (http.RoundTripper, error)
}

// CommandTimeout bounds one command to a host unless the caller's context
// ends sooner; a boot under software emulation can take several seconds.
const CommandTimeout = 2 * time.Minute

// Client sends the coordinator's commands to hosts: it owns the paths, puts
// the fencing epoch in HeaderEpoch, and turns refusals into *HostError
// values that match this package's error categories.
type Client struct {
	hosts Transports
}

// NewClient returns a client reaching hosts through t.
func NewClient(t Transports) *Client { return &Client{hosts: t} }

// Start boots or restores a session's machine (idempotent per epoch).
func (c *Client) Start(ctx context.Context, host domain.HostID, sid domain.SessionID, req StartRequest) (MachineStatus, error) {
	var st MachineStatus
	err := c.call(ctx, CommandTimeout, host, http.MethodPut, machinePath(PathMachine, sid), req.Epoch, req, &st)
	return st, err
}

// Destroy removes a session's machine; a host without it answers as done.
func (c *Client) Destroy(ctx context.Context, host domain.HostID, sid domain.SessionID, epoch int64) error {
	return c.call(ctx, CommandTimeout, host, http.MethodDelete, machinePath(PathMachine, sid), epoch, nil, nil)
}

// Snapshot captures a session's machine into chunks.
func (c *Client) Snapshot(ctx context.Context, host domain.HostID, sid domain.SessionID, req SnapshotRequest) (SnapshotResponse, error) {
	var resp SnapshotResponse
	err := c.call(ctx, CommandTimeout, host, http.MethodPost, machinePath(PathSnapshot, sid), req.Epoch, req, &resp)
	return resp, err
}

// Deliver hands outbox items to a session's guest.
func (c *Client) Deliver(ctx context.Context, host domain.HostID, sid domain.SessionID, d OutboxDelivery) (OutboxApplied, error) {
	var applied OutboxApplied
	err := c.call(ctx, CommandTimeout, host, http.MethodPost, machinePath(PathOutbox, sid), d.Epoch, d, &applied)
	return applied, err
}

// Capture makes an image's base snapshot on a host, within limit; epoch is
// the image job's.
func (c *Client) Capture(ctx context.Context, limit time.Duration, host domain.HostID, jobID domain.ImageJobID, epoch int64, req CaptureRequest) (CaptureResponse, error) {
	var resp CaptureResponse
	path := strings.Replace(PathCapture, "{id}", url.PathEscape(string(jobID)), 1)
	err := c.call(ctx, limit, host, http.MethodPost, path, epoch, req, &resp)
	return resp, err
}

// Machines lists what a host runs.
func (c *Client) Machines(ctx context.Context, host domain.HostID) ([]MachineStatus, error) {
	var ms []MachineStatus
	err := c.call(ctx, CommandTimeout, host, http.MethodGet, PathMachines, 0, nil, &ms)
	return ms, err
}

// GuestRoute is how to reach a session's guest daemon through its host:
// send requests through Transport to Prefix + a guest API path, with
// Header (the session's epoch).
type GuestRoute struct {
	Transport http.RoundTripper
	Prefix    string
	Header    http.Header
}

// Guest returns the route to a session's guest daemon on host, at epoch.
func (c *Client) Guest(ctx context.Context, host domain.HostID, sid domain.SessionID, epoch int64) (GuestRoute, error) {
	rt, err := c.hosts.Transport(ctx, host)
	if err != nil {
		return GuestRoute{}, fmt.Errorf("reach host %s of session %s: %w", host, sid, err)
	}
	h := http.Header{}
	h.Set(HeaderEpoch, strconv.FormatInt(epoch, 10))
	return GuestRoute{Transport: rt, Prefix: GuestPrefix(sid), Header: h}, nil
}

// GuestPrefix is the path prefix under which a host relays requests to a
// session's guest daemon (PathGuest without its trailing slash).
func GuestPrefix(sid domain.SessionID) string {
	return strings.TrimSuffix(machinePath(PathGuest, sid), "/")
}

func machinePath(pattern string, sid domain.SessionID) string {
	return strings.Replace(pattern, "{id}", url.PathEscape(string(sid)), 1)
}

// call sends one JSON command and decodes the answer into out.
func (c *Client) call(ctx context.Context, limit time.Duration, host domain.HostID, method, path string, epoch int64, in, out any) error {
	rt, err := c.hosts.Transport(ctx, host)
	if err != nil {
		return fmt.Errorf("reach host %s: %w", host, err)
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
	req.Header.Set(HeaderEpoch, strconv.FormatInt(epoch, 10))
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s on host %s: %w", method, path, host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s on host %s: %w", method, path, host, readHostError(resp))
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(out); err != nil {
			return fmt.Errorf("decode answer to %s %s on host %s: %w", method, path, host, err)
		}
	}
	return nil
}

// maxAnswer bounds a host's answer; a snapshot's manifests list every chunk.
const maxAnswer = 64 << 20

// readHostError reads a refusal: its ErrorBody, else its text.
func readHostError(resp *http.Response) *HostError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb ErrorBody
	if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
		eb = ErrorBody{Error: string(bytes.TrimSpace(raw))}
	}
	return &HostError{Status: resp.StatusCode, Code: eb.Code, Msg: eb.Error, Tail: eb.OutputTail}
}

// HostError is a command a host refused. errors.Is matches it against the
// category of its code (ErrStaleEpoch, ErrNoCapacity, ...).
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

// Is reports whether the refusal's code belongs to target's category.
func (e *HostError) Is(target error) bool {
	switch target {
	case ErrStaleEpoch:
		return e.Code == CodeStaleEpoch
	case ErrNoCapacity:
		return e.Code == CodeCapacity
	case ErrNoMachine:
		return e.Code == CodeNotFound
	case ErrSnapshotUnusable:
		return e.Code == CodeSnapshotCorrupt || e.Code == CodeSnapshotMissing
	case ErrImageRefused:
		return e.Code == CodeWarmupFailed || e.Code == CodeBootFailed || e.Status == http.StatusBadRequest
	}
	return false
}

// Categories of a host's refusals, matched by errors.Is on a *HostError.
var (
	// ErrStaleEpoch: the host has seen a newer epoch for the session; the
	// command's op lost its claim.
	ErrStaleEpoch = errors.New("host refused a stale epoch")
	// ErrNoCapacity: the host cannot take the machine now; place elsewhere.
	ErrNoCapacity = errors.New("host has no capacity")
	// ErrNoMachine: the host runs no machine for the session.
	ErrNoMachine = errors.New("host has no such machine")
	// ErrSnapshotUnusable: a chunk of the snapshot is missing or corrupt.
	ErrSnapshotUnusable = errors.New("snapshot unusable")
	// ErrImageRefused: the image itself failed on the host (boot, warm-up,
	// or a request the host rejected); another host would fail the same way.
	ErrImageRefused = errors.New("image refused by host")
)
