package chunk

import (
	"errors"
	"fmt"
)

// Error categories callers branch on (with errors.Is).
var (
	// ErrCorrupt: a stored chunk does not decode to bytes with its hash.
	ErrCorrupt = errors.New("chunk corrupt")
	// ErrMissing: a chunk a manifest names is in neither the cache nor the blob store.
	ErrMissing = errors.New("chunk missing")
)

// ChunkError names the chunk an operation failed on; it unwraps to the cause
// (ErrCorrupt, ErrMissing, a blob or context error).
type ChunkError struct {
	Index int // position in the manifest (first one, if the hash repeats)
	Hash  string
	Err   error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %d (%s): %v", e.Index, e.Hash, e.Err)
}

func (e *ChunkError) Unwrap() error { return e.Err }
