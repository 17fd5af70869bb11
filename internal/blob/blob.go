package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// Error categories callers branch on.
var (
	ErrNotFound   = errors.New("blob not found")
	ErrInvalidKey = errors.New("invalid blob key")
)

// Info describes a stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is an object store. Keys are slash-separated paths of [A-Za-z0-9._-]
// segments (no empty, "." or ".." segments, at most 1024 bytes); anything
// else is ErrInvalidKey. Put is atomic: a reader sees the whole object or
// none, never a partial one, including after a crash mid-Put.
//
// Clarifications every backend follows (checked by blob/blobtest):
//   - A segment is at most 255 bytes (a file name on every filesystem);
//     longer is ErrInvalidKey.
//   - Key order is byte-wise string order ("a-b" < "a.b" < "a/b" < "a0").
//   - A key that is a whole-segment prefix of another key ("a" and "a/b")
//     may be refused by filesystem-backed stores; callers must not rely on
//     both existing. A refused Put changes nothing.
//   - A List prefix is a plain string prefix, not a directory: "chunks/ab"
//     matches "chunks/abc". A prefix no valid key starts with matches
//     nothing; it is not an error.
//   - The reader from Get is bound to ctx: cancelling ctx fails later reads.
//   - Every method fails with the context's error when ctx is done.
type Store interface {
	// Put stores size bytes from r under key, replacing any object there.
	// size < 0 means unknown (streamed); a short read fails the Put and
	// leaves no object.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the object; ErrNotFound if absent.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object; ErrNotFound if absent.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object; deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in key
	// order; fn returning an error stops the listing with that error.
	List(ctx context.Context, prefix string, fn func(Info) error) error
}
