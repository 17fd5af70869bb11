package slackapp

import (
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/connector"
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

// Sign is the X-Slack-Signature of body sent at ts.
func Sign(secret string, ts int64, body []byte) string {
	return connector.HMAC([]byte(secret), "v0=", []byte("v0:"+strconv.FormatInt(ts, 10)+":"), body)
}

// verify checks a request's timestamp and signature; a refusal wraps
// connector.ErrBadSignature.
func verify(secret, timestamp, signature string, body []byte, now time.Time) error {
	at, err := connector.ParseUnix(timestamp)
	if err != nil {
		return err
	}
	if err := connector.CheckTime(at, now, Window); err != nil {
		return err
	}
	return connector.VerifyHMAC([]byte(secret), signature, "v0=", false, []byte("v0:"+strconv.FormatInt(at.Unix(), 10)+":"), body)
}
