package hostlink

import (
	"github.com/engrams/engrams/internal/domain"

	"context"
	"encoding/json"
	"errors"
	"net/http"
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
)

type hostIDKey struct{}

// HostIDFrom returns the authenticated host id of a request the host sent
// over its link (set for every request ServerDeps.Handler serves).
func HostIDFrom(ctx context.Context) (domain.HostID, bool) {
	id, ok := ctx.Value(hostIDKey{}).(domain.HostID)
	return id, ok && id != ""
}

// WithHostID returns ctx carrying hostID as HostIDFrom reads it (for tests of
// handlers mounted as ServerDeps.Handler).
func WithHostID(ctx context.Context, hostID domain.HostID) context.Context {
	return context.WithValue(ctx, hostIDKey{}, hostID)
}

// WriteError writes an ErrorBody as JSON with the given status.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteErrorBody(w, status, ErrorBody{Error: msg, Code: code})
}

// WriteErrorBody answers with status and body.
func WriteErrorBody(w http.ResponseWriter, status int, body ErrorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
