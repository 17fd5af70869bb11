package automations

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// Signed webhooks (POST /v1/hooks/{slug}): the sender puts
// X-Engrams-Timestamp (Unix seconds) and X-Engrams-Signature
// ("v1=" + hex HMAC-SHA256 of "TIMESTAMP.BODY" keyed by the hook's secret)
// on each delivery, and X-Engrams-Delivery (an id unique per delivery, for
// retries to be recognised).
const (
	HeaderWebhookTimestamp = apiv1.HeaderHookTimestamp
	HeaderWebhookSignature = apiv1.HeaderHookSignature
	HeaderWebhookDelivery  = apiv1.HeaderHookDelivery
	// WebhookWindow is how far a delivery's timestamp may be from now.
	WebhookWindow = 5 * time.Minute
)

// ErrBadSignature is the category of every refused webhook delivery.
var ErrBadSignature = errors.New("webhook signature refused")

// SignWebhook is the X-Engrams-Signature of body sent at ts.
func SignWebhook(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%d.", ts)
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// VerifyWebhook checks a delivery's timestamp (within WebhookWindow of
// now) and signature (any of several "v1=…" values, comma-separated, for
// secret rotation).
func VerifyWebhook(secret []byte, timestamp, signature string, body []byte, now time.Time) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: the hook has no secret", ErrBadSignature)
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
	if err != nil || len(timestamp) > 20 {
		return fmt.Errorf("%w: %s is not Unix seconds", ErrBadSignature, HeaderWebhookTimestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > WebhookWindow || d < -WebhookWindow {
		return fmt.Errorf("%w: the timestamp is %s away from now (at most %s)", ErrBadSignature, d.Round(time.Second), WebhookWindow)
	}
	if len(signature) > 1024 {
		return fmt.Errorf("%w: %s is too long", ErrBadSignature, HeaderWebhookSignature)
	}
	want := SignWebhook(secret, ts, body)
	for _, s := range strings.Split(signature, ",") {
		if hmac.Equal([]byte(strings.TrimSpace(s)), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrBadSignature)
}
