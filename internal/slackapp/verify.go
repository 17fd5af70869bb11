package slackapp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Slack signs each Events API request: X-Slack-Signature is "v0=" and the
// hex HMAC-SHA256 of "v0:TIMESTAMP:BODY" keyed by the app's signing
// secret; X-Slack-Request-Timestamp is the Unix time it was sent.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
	// Window is how far a request's timestamp may be from now.
	Window = 5 * time.Minute
)

// ErrBadSignature is the category of every refused request.
var ErrBadSignature = errors.New("slack signature refused")

// Sign is the X-Slack-Signature of body sent at ts.
func Sign(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%d:", ts)
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a request's timestamp and signature.
func Verify(secret, timestamp, signature string, body []byte, now time.Time) error {
	if secret == "" {
		return fmt.Errorf("%w: no signing secret is configured", ErrBadSignature)
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
	if err != nil || len(timestamp) > 20 {
		return fmt.Errorf("%w: %s is not Unix seconds", ErrBadSignature, HeaderTimestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Window || d < -Window {
		return fmt.Errorf("%w: the timestamp is %s away from now (at most %s)", ErrBadSignature, d.Round(time.Second), Window)
	}
	if len(signature) > 200 || !hmac.Equal([]byte(signature), []byte(Sign(secret, ts, body))) {
		return fmt.Errorf("%w: the signature does not match", ErrBadSignature)
	}
	return nil
}
