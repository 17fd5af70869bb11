package connector

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxSignature bounds a signature header as presented (several values for
// a rotation included).
const maxSignature = 1024

// HMAC is prefix and the hex HMAC-SHA256, keyed by secret, of parts
// written one after the other: every signing scheme of the integrations
// is one (Slack "v0=" over "v0:TS:BODY", GitHub "sha256=" over the body,
// Linear over the body, signed webhooks "v1=" over "TS.BODY").
func HMAC(secret []byte, prefix string, parts ...[]byte) string {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return prefix + hex.EncodeToString(m.Sum(nil))
}

// VerifyHMAC checks presented against HMAC(secret, prefix, parts...) in
// constant time; with list, presented may hold several comma-separated
// values (one per secret of a rotation) and one must match. Every refusal
// wraps ErrBadSignature.
func VerifyHMAC(secret []byte, presented, prefix string, list bool, parts ...[]byte) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret is configured", ErrBadSignature)
	}
	if presented == "" || len(presented) > maxSignature {
		return fmt.Errorf("%w: no signature, or one over %d bytes", ErrBadSignature, maxSignature)
	}
	want := []byte(HMAC(secret, prefix, parts...))
	values := []string{presented}
	if list {
		values = strings.Split(presented, ",")
	}
	match := false
	for _, v := range values { // every value compared: no early exit
		if hmac.Equal([]byte(strings.TrimSpace(v)), want) {
			match = true
		}
	}
	if match {
		return nil
	}
	return fmt.Errorf("%w: the signature does not match", ErrBadSignature)
}

// ParseUnix reads a timestamp header of Unix seconds.
func ParseUnix(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || len(s) > 12 || n < 0 {
		return time.Time{}, fmt.Errorf("%w: the timestamp %.20q is not Unix seconds", ErrBadSignature, s)
	}
	return time.Unix(n, 0), nil
}

// CheckTime refuses a delivery sent further than window from now, either
// way: a replay of an old delivery, or one dated ahead to outlive the
// memory of deliveries seen.
func CheckTime(at, now time.Time, window time.Duration) error {
	if d := now.Sub(at); d > window || d < -window {
		return fmt.Errorf("%w: sent %s away from now, at most %s", ErrBadSignature, d.Round(time.Second), window)
	}
	return nil
}
