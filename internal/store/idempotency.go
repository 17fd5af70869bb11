package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Idempotency keeps the answers of POSTs sent with an Idempotency-Key, so
// a retried request is answered again instead of run again.
type Idempotency interface {
	// BeginIdempotent records req's key as running and returns created
	// true, unless the caller used the key already: then it returns what
	// the key recorded (Status 0 while that request runs). Keys recorded
	// before expireBefore are forgotten first; a key still running after
	// 10 minutes is taken over (its request died with its replica).
	BeginIdempotent(ctx context.Context, req domain.IdempotentRequest, expireBefore time.Time) (prev domain.IdempotentResponse, created bool, err error)
	// FinishIdempotent records the answer of the key's request. A Status
	// of 0 forgets the key instead (the request ended without an answer
	// worth replaying; a retry runs it again).
	FinishIdempotent(ctx context.Context, tokenID, key string, resp domain.IdempotentResponse) error
}
