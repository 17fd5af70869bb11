package blob

import (
	"context"
	"io"
	"strings"
)

// Key limits of the contract.
const (
	MaxKeyLen     = 1024
	MaxSegmentLen = 255
)

// ValidKey reports whether key follows the contract: slash-separated
// segments of [A-Za-z0-9._-], none empty, "." or "..", each at most 255
// bytes, at most 1024 bytes in all. Such a key can never name a path
// outside the store's directory, nor its temp directory.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' {
			if !keyByte(key[i]) {
				return false
			}
			continue
		}
		if !validSegment(key[start:i]) {
			return false
		}
		start = i + 1
	}
	return true
}

// PrefixCanMatch reports whether some valid key starts with prefix: its
// whole segments form a valid key and its tail is a partial segment.
func PrefixCanMatch(prefix string) bool {
	if len(prefix) > MaxKeyLen {
		return false
	}
	tail := prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		if !ValidKey(prefix[:i]) {
			return false
		}
		tail = prefix[i+1:]
	}
	if len(tail) > MaxSegmentLen {
		return false
	}
	for i := 0; i < len(tail); i++ {
		if !keyByte(tail[i]) {
			return false
		}
	}
	return true
}

func validSegment(seg string) bool {
	if seg == "" || seg == "." || seg == ".." || len(seg) > MaxSegmentLen {
		return false
	}
	for i := 0; i < len(seg); i++ {
		if !keyByte(seg[i]) {
			return false
		}
	}
	return true
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// ctxReader fails reads once ctx is done, so a stalled or long copy stops
// on cancellation. It also hides the underlying reader's optional
// interfaces, keeping copies on the plain streaming path.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ctxReadCloser is a reader bound to the caller's ctx.
type ctxReadCloser struct {
	ctxReader
	c io.Closer
}

func (c *ctxReadCloser) Close() error { return c.c.Close() }

// ContextReader returns a reader that fails once ctx is done, so a stalled
// or long copy stops on cancellation.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx: ctx, r: r} }

// ContextReadCloser is ContextReader for what Get implementations return.
func ContextReadCloser(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	return &ctxReadCloser{ctxReader: ctxReader{ctx: ctx, r: rc}, c: rc}
}
