package domain

import "time"

// IdempotentRequest is one POST sent with an Idempotency-Key.
type IdempotentRequest struct {
	TokenID  string // the caller's token: each caller's keys are its own
	Key      string
	Route    string // the method and path it was sent to
	BodyHash string // of its body (hex sha256): a reused key must send the same
	At       time.Time
}

// IdempotentResponse is what a key recorded.
type IdempotentResponse struct {
	Route, BodyHash string
	// Status is 0 while the first request with the key still runs.
	Status      int
	ContentType string
	Body        []byte
}
