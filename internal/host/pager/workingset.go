package pager

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A working set is the chunks a guest touched, in first-touch order,
// stored with its snapshot. Encoding: the magic, then each chunk index as
// a uvarint delta-zigzag from the previous one (touch order is mostly
// ascending runs, so most entries are one byte).
const wsMagic = "engrams-ws1\n"

// MaxWorkingSet bounds a decoded working set: more entries than any guest
// memory this host runs has chunks (16 GiB of 64 KiB chunks).
const MaxWorkingSet = 1 << 18

// ErrBadWorkingSet says a working set could not be decoded.
var ErrBadWorkingSet = errors.New("bad working set")

// EncodeWorkingSet encodes chunk indexes in order, the first
// MaxWorkingSet of them (what a decoder takes).
func EncodeWorkingSet(idxs []int) []byte {
	idxs = idxs[:min(len(idxs), MaxWorkingSet)]
	b := make([]byte, 0, len(wsMagic)+len(idxs)+8)
	b = append(b, wsMagic...)
	prev := int64(0)
	for _, i := range idxs {
		b = binary.AppendVarint(b, int64(i)-prev)
		prev = int64(i)
	}
	return b
}

// DecodeWorkingSet decodes a working set of a memory of chunks chunks: every
// index in range, none twice, at most MaxWorkingSet. It never panics on
// any input (the bytes come back from a blob store a guest's host wrote).
func DecodeWorkingSet(b []byte, chunks int) ([]int, error) {
	if len(b) < len(wsMagic) || string(b[:len(wsMagic)]) != wsMagic {
		return nil, fmt.Errorf("%w: no magic", ErrBadWorkingSet)
	}
	b = b[len(wsMagic):]
	var out []int
	seen := make(map[int]struct{})
	prev := int64(0)
	for len(b) > 0 {
		d, n := binary.Varint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad varint at entry %d", ErrBadWorkingSet, len(out))
		}
		b = b[n:]
		v := prev + d
		if v < 0 || v >= int64(chunks) {
			return nil, fmt.Errorf("%w: entry %d is chunk %d of %d", ErrBadWorkingSet, len(out), v, chunks)
		}
		if _, dup := seen[int(v)]; dup {
			return nil, fmt.Errorf("%w: chunk %d twice", ErrBadWorkingSet, v)
		}
		if len(out) == MaxWorkingSet {
			return nil, fmt.Errorf("%w: more than %d entries", ErrBadWorkingSet, MaxWorkingSet)
		}
		seen[int(v)] = struct{}{}
		out = append(out, int(v))
		prev = v
	}
	return out, nil
}
