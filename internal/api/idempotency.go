package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// IdempotencyKeys keeps the answers of POSTs sent with an Idempotency-Key
// (the store satisfies it).
type IdempotencyKeys interface {
	BeginIdempotent(ctx context.Context, req domain.IdempotentRequest, expireBefore time.Time) (domain.IdempotentResponse, bool, error)
	FinishIdempotent(ctx context.Context, tokenID, key string, resp domain.IdempotentResponse) error
}

// How long a key is kept, and the largest answer kept for replay (a
// larger one is answered and its key forgotten).
const (
	idempotencyTTL      = 24 * time.Hour
	maxIdempotentAnswer = 1 << 20
	maxIdempotencyKey   = 255
)

// idempotent makes route's POSTs honour apiv1.HeaderIdempotencyKey (see
// there) when the API has IdempotencyKeys.
func (s *Server) idempotent(route string, next http.Handler) http.Handler {
	keys := s.deps.Idempotency
	if keys == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(apiv1.HeaderIdempotencyKey)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !validIdempotencyKey(key) {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "Idempotency-Key: at most 255 printable ASCII characters")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
		if err != nil || int64(len(body)) > s.cfg.MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, apiv1.CodeTooLarge, "request body too large for a request with an Idempotency-Key")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		tokenID := principalFrom(r.Context()).KeyID
		now := s.now()
		// The request's own path and query, not the route's pattern: the
		// key sent to another session's suspend is another request.
		target := r.Method + " " + r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		req := domain.IdempotentRequest{TokenID: tokenID, Key: key, Route: target, BodyHash: hex.EncodeToString(sum[:]), At: now}
		prev, created, err := keys.BeginIdempotent(r.Context(), req, now.Add(-idempotencyTTL))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !created {
			replay(w, prev, req)
			return
		}
		rec := &capture{statusRecorder: statusRecorder{ResponseWriter: w}}
		finished := false
		defer func() { // a handler that panics forgets the key, so a retry runs
			if !finished {
				_ = keys.FinishIdempotent(context.WithoutCancel(r.Context()), tokenID, key, domain.IdempotentResponse{})
			}
		}()
		next.ServeHTTP(rec, r)
		finished = true
		keep := domain.IdempotentResponse{}
		if rec.status >= 200 && rec.status < 300 && !rec.overflow && !rec.secret {
			keep = domain.IdempotentResponse{Status: rec.status, ContentType: rec.Header().Get("Content-Type"), Body: rec.body.Bytes()}
		}
		if err := keys.FinishIdempotent(context.WithoutCancel(r.Context()), tokenID, key, keep); err != nil {
			s.log.Warn("record an idempotent answer", "route", route, "err", err)
		}
	})
}

// writeSecret answers v, which holds a secret shown once (a token, a
// host's credential, a hook's secret): the answer is never kept for an
// Idempotency-Key's replay, in the clear or otherwise, so a retry with the
// key runs again (a create then finds its name taken: 409) and the secret
// is written nowhere but to the client.
func writeSecret(w http.ResponseWriter, status int, v any) {
	for u := w; u != nil; {
		if c, ok := u.(*capture); ok {
			c.secret = true
			break
		}
		uw, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		u = uw.Unwrap()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, v)
}

// replay answers a request whose key was used before.
func replay(w http.ResponseWriter, prev domain.IdempotentResponse, req domain.IdempotentRequest) {
	switch {
	case prev.Route != req.Route || prev.BodyHash != req.BodyHash:
		writeError(w, http.StatusConflict, apiv1.CodeConflict, "this Idempotency-Key was used for another request (route or body): send a new key")
	case prev.Status == 0:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, apiv1.CodeConflict, "the first request with this Idempotency-Key is still running: retry in a moment")
	default:
		if prev.ContentType != "" {
			w.Header().Set("Content-Type", prev.ContentType)
		}
		w.Header().Set(apiv1.HeaderIdempotentReplayed, "true")
		w.Header().Set("Content-Length", strconv.Itoa(len(prev.Body)))
		w.WriteHeader(prev.Status)
		_, _ = w.Write(prev.Body)
	}
}

func validIdempotencyKey(k string) bool {
	if len(k) > maxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// capture passes an answer through and keeps a copy of it (up to
// maxIdempotentAnswer bytes).
type capture struct {
	statusRecorder
	body     bytes.Buffer
	overflow bool
	secret   bool // the answer shows a secret: never kept (writeSecret)
}

func (c *capture) Write(b []byte) (int, error) {
	switch {
	case c.secret: // never copied: it is not kept
	case c.body.Len()+len(b) > maxIdempotentAnswer:
		c.overflow = true
	case !c.overflow:
		c.body.Write(b)
	}
	return c.statusRecorder.Write(b)
}

// Flush lets streamed answers through (they are not kept once too large).
func (c *capture) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
