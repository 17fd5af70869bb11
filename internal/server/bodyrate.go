package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Request bodies must keep coming: a body that brings fewer than
// BodyMinBytes in any BodyWindow (and has not ended) is cut, so a client
// trickling a byte a second cannot hold a connection (and a handler) for
// ever. It is a rate, not a total: a large upload streams as long as its
// bytes flow. Requests without a body (event streams, WebSocket upgrades)
// are never cut.
const (
	defaultBodyWindow   = 30 * time.Second
	defaultBodyMinBytes = 16 << 10
)

// limitBodyRate makes next's request bodies fail (with an error matching
// os.ErrDeadlineExceeded) once a window passes without min bytes: the
// connection's read deadline is set one window ahead at the start and
// moved a window ahead each time min more bytes arrived, and cleared when
// the body ends, so a handler that then waits (a suspend, an event stream)
// keeps its connection. A body the handler never reads is cut as well:
// net/http's own read of what is left meets the first deadline.
func limitBodyRate(next http.Handler, window time.Duration, min int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(window)); err != nil {
			next.ServeHTTP(w, r) // a connection without deadlines (HTTP/2 over a pipe, tests)
			return
		}
		r2 := *r // net/http keeps the original request, and its own body logic
		r2.Body = &rateBody{ReadCloser: r.Body, rc: rc, window: window, min: min}
		next.ServeHTTP(w, &r2)
	})
}

// rateBody moves the read deadline as bytes arrive (see limitBodyRate).
type rateBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	window time.Duration
	min    int64
	got    int64 // since the deadline last moved
	ended  bool
}

func (b *rateBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.ended {
		return n, err
	}
	if b.got += int64(n); b.got >= b.min {
		b.got = 0
		_ = b.rc.SetReadDeadline(time.Now().Add(b.window))
	}
	switch {
	case errors.Is(err, io.EOF):
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("request body: fewer than %d bytes in %s: %w", b.min, b.window, err)
	}
	return n, err
}
