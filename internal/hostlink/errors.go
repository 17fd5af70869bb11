package hostlink

import (
	"github.com/engrams/engrams/internal/domain"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Error categories callers branch on.
var (
	// ErrVersionMismatch: the two ends speak different protocol versions.
	ErrVersionMismatch = errors.New("hostlink protocol version mismatch")
	// ErrUnauthorized: the coordinator refused the host's token.
	ErrUnauthorized = errors.New("hostlink token refused")
	// ErrHostNotConnected: no replica holds a connection to the host.
	ErrHostNotConnected = errors.New("host not connected")
	// ErrClosed: the host's connection to the coordinator is closed.
	ErrClosed = errors.New("hostlink connection closed")
	// ErrAlreadyConnected: another link of the same host is live (a second
	// agent started with the host's token), or took over from this one.
	ErrAlreadyConnected = errors.New("host already connected")
)

// Error codes of ErrorBody, besides those in protocol.go.
const (
	CodeHostNotConnected = "host_not_connected"
	CodeUnauthorized     = "unauthorized"
	CodeBadRequest       = "bad_request"
	CodeUnavailable      = "unavailable"
	CodeBadGateway       = "bad_gateway"
	CodeNotFound         = "not_found"
	CodeStaleEpoch       = "stale_epoch"
	CodeCapacity         = "capacity"
	CodeInternal         = "internal"
	CodeUnsupported      = "unsupported"      // the host cannot (no chunk store, backend cannot snapshot)
	CodePaused           = "paused"           // the host's lease expired: its machines are paused
	CodeSnapshotFailed   = "snapshot_failed"  // capture or upload failed; the machine runs on
	CodeSnapshotMissing  = "snapshot_missing" // a chunk the snapshot names is not stored
	CodeSnapshotCorrupt  = "snapshot_corrupt" // a chunk or manifest fails verification
	CodeRestoreFailed    = "restore_failed"   // chunks verified, the backend could not restore
	CodeGuestFailed      = "guest_failed"     // the guest daemon refused or did not answer
	CodeBootFailed       = "boot_failed"      // an image capture could not boot the image
	CodeWarmupFailed     = "warmup_failed"    // an image's warm-up command failed, stalled or ran out of time
	// Refusals of a host's link or of its requests (see Refusal).
	CodeAlreadyConnected = "already_connected" // 409: another live link holds the host
	CodeSuperseded       = "superseded"        // 409: this link no longer holds the host
	CodeHostDisabled     = "host_disabled"     // 403: an admin disabled the host
	CodeHostDeleted      = "host_deleted"      // 403: an admin deleted the host
)

type linkKey struct{}

// HostIDFrom returns the authenticated host id of a request the host sent
// over its link (set for every request ServerDeps.Handler serves).
func HostIDFrom(ctx context.Context) (domain.HostID, bool) {
	l, ok := ctx.Value(linkKey{}).(LinkInfo)
	return l.HostID, ok && l.HostID != ""
}

// LinkFrom returns the link a request came over (set for every request
// ServerDeps.Handler serves; WithHostID sets only its HostID).
func LinkFrom(ctx context.Context) (LinkInfo, bool) {
	l, ok := ctx.Value(linkKey{}).(LinkInfo)
	return l, ok && l.HostID != ""
}

// WithHostID returns ctx carrying hostID as HostIDFrom reads it (for tests of
// handlers mounted as ServerDeps.Handler).
func WithHostID(ctx context.Context, hostID domain.HostID) context.Context {
	return WithLink(ctx, LinkInfo{HostID: hostID})
}

// WithLink returns ctx carrying l as LinkFrom reads it.
func WithLink(ctx context.Context, l LinkInfo) context.Context {
	return context.WithValue(ctx, linkKey{}, l)
}

// Refusal is the coordinator's refusal of a host's link, or of a request
// the host sent on it: the status and ErrorBody code it is answered with,
// and how long the host should wait before it tries again (0: its own
// backoff; sent as Retry-After). errors.Is matches its category:
// ErrUnauthorized for CodeUnauthorized, CodeHostDisabled and
// CodeHostDeleted; ErrAlreadyConnected for CodeAlreadyConnected and
// CodeSuperseded.
type Refusal struct {
	Status     int
	Code       string
	Msg        string
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Msg }

// Is reports whether target is the category of r's code.
func (r *Refusal) Is(target error) bool {
	switch r.Code {
	case CodeUnauthorized, CodeHostDisabled, CodeHostDeleted:
		return target == ErrUnauthorized
	case CodeAlreadyConnected, CodeSuperseded:
		return target == ErrAlreadyConnected
	}
	return false
}

// AlreadyConnected refuses a second link of host (its name or id) while
// the link from remote, connected at since, holds it.
func AlreadyConnected(host, remote string, since time.Time, retryAfter time.Duration) *Refusal {
	return &Refusal{Status: http.StatusConflict, Code: CodeAlreadyConnected, RetryAfter: retryAfter,
		Msg: fmt.Sprintf("host %s is already connected from %s since %s; stop the other agent or wait for its link to time out",
			host, remote, since.UTC().Format(time.RFC3339))}
}

// WriteRefusal answers with r (and Retry-After when it names a wait).
func WriteRefusal(w http.ResponseWriter, r *Refusal) {
	if r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(r.RetryAfter.Seconds()))))
	}
	WriteError(w, r.Status, r.Code, r.Msg)
}

// RefusalOf reads a refusal from an answer's status, headers and body; nil
// when the answer is not one (see Refusal for the codes).
func RefusalOf(status int, h http.Header, body ErrorBody) *Refusal {
	r := &Refusal{Status: status, Code: body.Code, Msg: body.Error}
	if r.Msg == "" {
		r.Msg = http.StatusText(status)
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		r.RetryAfter = time.Duration(s) * time.Second
	}
	switch {
	case status == http.StatusUnauthorized:
		r.Code = CodeUnauthorized
	case status == http.StatusForbidden && (body.Code == CodeHostDisabled || body.Code == CodeHostDeleted):
	case status == http.StatusConflict && (body.Code == CodeAlreadyConnected || body.Code == CodeSuperseded):
	default:
		return nil
	}
	return r
}

// RetryAfter is how long a refusal err wraps asks to wait (0: none named).
func RetryAfter(err error) time.Duration {
	var r *Refusal
	if errors.As(err, &r) {
		return r.RetryAfter
	}
	return 0
}

// WriteError writes an ErrorBody as JSON with the given status.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteErrorBody(w, status, ErrorBody{Error: msg, Code: code})
}

// WriteErrorBody answers with status and body.
// It names its length, so a flushed answer is complete on the wire.
func WriteErrorBody(w http.ResponseWriter, status int, body ErrorBody) {
	b, _ := json.Marshal(body) // strings only: never fails
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
