package guestapi

import (
	"errors"
	"io"
)

// Bounds on what a reader of the guest daemon's answers takes in. The guest
// is hostile (root, maybe prompt-injected): every reader of its answers
// holds at most these, whatever it sends.
const (
	// MaxHeaderBytes bounds the status line and headers of any answer of
	// the guest daemon, a tunnel's 101 included (64 KiB): the daemon's own
	// are a few hundred bytes.
	MaxHeaderBytes = 64 << 10
	// MaxFileListBytes bounds the JSON of a PathFileList answer (16 MiB:
	// some 80,000 entries of about 200 bytes, more than a directory a
	// person reads). A relay ends a longer answer mid-stream.
	MaxFileListBytes = 16 << 20
	// MaxAnswerBytes bounds every other JSON answer the host or the
	// coordinator decodes (ready, stat, harness status, outbox state): 1
	// MiB, where the daemon's are under 1 KiB.
	MaxAnswerBytes = 1 << 20
)

// ErrAnswerTooLarge: an answer of the guest ran past its bound.
var ErrAnswerTooLarge = errors.New("guest: answer over its bound")

// LimitReader reads at most n bytes of r; when r holds more, the read
// after the n-th byte fails with ErrAnswerTooLarge (not io.EOF, so a
// decoder never mistakes a cut answer for a whole one).
func LimitReader(r io.Reader, n int64) io.Reader { return &limitReader{r: r, n: n} }

type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if l.n <= 0 {
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, ErrAnswerTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
