package chunk

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ManifestVersion is the manifest format this package writes. It reads
// version 1 too (the same without delta refs).
const ManifestVersion = 2

// Chunk size bounds and defaults.
//
// MemoryChunkSize (64 KiB) is the unit for guest memory files (RAM at fixed
// offsets). An idle guest still writes a few hundred scattered pages between
// two snapshots (timers, the guest-channel reconnect): measured on a 256 MiB
// QEMU guest, 1.2% of 4 KiB pages differed, which dirtied 46% of 2 MiB
// chunks (44 MiB re-uploaded) but only 8% of 64 KiB chunks (5.8 MiB). 64 KiB
// keeps re-uploads small at the cost of more objects (a guest with 1 GiB of
// touched memory is 16k chunks; uploads run in parallel and skip chunks the
// store has). Lazy restore with userfaultfd can still fault in larger runs.
// PutFileOver goes further: a changed chunk is stored as a delta over the
// previous snapshot's chunk, which costs about the changed pages.
//
// DiskChunkSize (4 MiB) is the unit for disk layers and device state: disk
// writes cluster in files and extents, so a larger unit halves object count and
// request overhead with little extra re-upload, and 4 MiB is a multiple of every
// block and erase size a virtual disk uses.
//
// Chunk sizes must be multiples of 4 KiB (pages and file-system blocks, so zero
// chunks can become holes) between MinChunkSize and MaxChunkSize.
const (
	MemoryChunkSize  int64 = 64 << 10
	DiskChunkSize    int64 = 4 << 20
	DefaultChunkSize       = DiskChunkSize
	MinChunkSize     int64 = 4 << 10
	MaxChunkSize     int64 = 64 << 20
)

// ErrInvalidManifest is the category of every manifest validation failure.
var ErrInvalidManifest = errors.New("invalid manifest")

// Ref names one chunk of a manifest: the lowercase hex SHA-256 of its
// uncompressed bytes, or the zero marker (empty Hash) for an all-zero chunk,
// which is never stored. A chunk is stored as the object of its hash, or,
// when Delta is set, as two objects: Base (a stored chunk, usually the same
// chunk of an earlier snapshot) and Delta, the XOR of the chunk with Base
// (mostly zero pages, so stored small; see formatPages). In JSON a Ref is
// the hex string, "zero", or "<hash>=<base>^<delta>".
type Ref struct {
	Hash  string
	Base  string // with Delta: the stored chunk the delta applies to
	Delta string // the stored XOR of this chunk with Base
}

// ZeroRef is the marker for an all-zero chunk.
func ZeroRef() Ref { return Ref{} }

// IsZero reports whether the chunk is all zero (not stored).
func (r Ref) IsZero() bool { return r.Hash == "" }

// IsDelta reports whether the chunk is stored as Base XOR Delta.
func (r Ref) IsDelta() bool { return r.Delta != "" }

// Objects are the blob objects the chunk needs: none for a zero chunk, its
// own for a whole one, Base and Delta for a delta.
func (r Ref) Objects() []string {
	switch {
	case r.IsZero():
		return nil
	case r.IsDelta():
		return []string{r.Base, r.Delta}
	}
	return []string{r.Hash}
}

// String returns the ref's text form.
func (r Ref) String() string {
	switch {
	case r.IsZero():
		return zeroText
	case r.IsDelta():
		return r.Hash + "=" + r.Base + "^" + r.Delta
	}
	return r.Hash
}

const zeroText = "zero"

func (r Ref) valid() bool {
	if r.IsZero() {
		return r.Base == "" && r.Delta == ""
	}
	if !validHash(r.Hash) {
		return false
	}
	if r.IsDelta() || r.Base != "" {
		return validHash(r.Base) && validHash(r.Delta) && r.Base != r.Hash
	}
	return true
}

// MarshalText encodes the ref's text form.
func (r Ref) MarshalText() ([]byte, error) {
	if !r.valid() {
		return nil, fmt.Errorf("marshal chunk ref %q: %w: not a lowercase hex sha256 (or hash=base^delta)", r.String(), ErrInvalidManifest)
	}
	return []byte(r.String()), nil
}

// UnmarshalText decodes a hash, "zero" or "<hash>=<base>^<delta>".
func (r *Ref) UnmarshalText(b []byte) error {
	s := string(b)
	if s == zeroText {
		*r = Ref{}
		return nil
	}
	var out Ref
	if h, rest, ok := strings.Cut(s, "="); ok {
		base, delta, _ := strings.Cut(rest, "^")
		out = Ref{Hash: h, Base: base, Delta: delta}
	} else {
		out = Ref{Hash: s}
	}
	if out.IsZero() || !out.valid() {
		return fmt.Errorf("decode chunk ref %.80q: %w: not a lowercase hex sha256, %q or hash=base^delta", s, ErrInvalidManifest, zeroText)
	}
	*r = out
	return nil
}

// validHash reports whether s is 64 lowercase hex digits.
func validHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// hashHex is the lowercase hex form of a SHA-256 sum.
func hashHex(sum [32]byte) string { return hex.EncodeToString(sum[:]) }

// Manifest lists one file's chunks. Chunk i covers bytes
// [i*ChunkSize, min((i+1)*ChunkSize, Size)); the last chunk may be short.
// Name and Role are free-form labels (e.g. Role "memory", "state", "disk").
type Manifest struct {
	Version   int    `json:"version"`
	Name      string `json:"name,omitempty"`
	Role      string `json:"role,omitempty"`
	ChunkSize int64  `json:"chunk_size"`
	Size      int64  `json:"size"`
	Chunks    []Ref  `json:"chunks"`
}

// NumChunks is the number of chunks a file of size bytes has.
func NumChunks(size, chunkSize int64) int64 {
	if size <= 0 || chunkSize <= 0 {
		return 0
	}
	n := size / chunkSize
	if size%chunkSize != 0 {
		n++
	}
	return n
}

// ChunkLen is the length of chunk i of the manifest's file.
func (m Manifest) ChunkLen(i int) int64 {
	off := int64(i) * m.ChunkSize
	return min(m.ChunkSize, m.Size-off)
}

// Validate checks the manifest's internal consistency; errors wrap ErrInvalidManifest.
func (m Manifest) Validate() error {
	switch {
	case m.Version != ManifestVersion && m.Version != 1:
		return fmt.Errorf("%w: version %d, want 1 or %d", ErrInvalidManifest, m.Version, ManifestVersion)
	case m.ChunkSize < MinChunkSize || m.ChunkSize > MaxChunkSize || m.ChunkSize%MinChunkSize != 0:
		return fmt.Errorf("%w: chunk size %d not a multiple of %d in [%d, %d]",
			ErrInvalidManifest, m.ChunkSize, MinChunkSize, MinChunkSize, MaxChunkSize)
	case m.Size < 0:
		return fmt.Errorf("%w: negative size %d", ErrInvalidManifest, m.Size)
	}
	if want := NumChunks(m.Size, m.ChunkSize); int64(len(m.Chunks)) != want {
		return fmt.Errorf("%w: %d chunks for size %d at chunk size %d, want %d",
			ErrInvalidManifest, len(m.Chunks), m.Size, m.ChunkSize, want)
	}
	for i, r := range m.Chunks {
		if !r.valid() || (m.Version == 1 && r.IsDelta()) {
			return fmt.Errorf("%w: chunk %d: ref %.80q is not lowercase hex sha256 (or hash=base^delta in version %d)",
				ErrInvalidManifest, i, r.String(), ManifestVersion)
		}
	}
	return nil
}

// Encode validates the manifest and serializes it as JSON.
func (m Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	if m.Chunks == nil {
		m.Chunks = []Ref{}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return b, nil
}

// Decode parses and validates a JSON manifest. Unknown fields, trailing data
// and inconsistent contents are errors wrapping ErrInvalidManifest.
func Decode(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w: %w", ErrInvalidManifest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Manifest{}, fmt.Errorf("decode manifest: %w: trailing data after the object", ErrInvalidManifest)
	}
	if m.Chunks == nil && m.Size > 0 {
		return Manifest{}, fmt.Errorf("decode manifest: %w: missing chunks", ErrInvalidManifest)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %w", err)
	}
	return m, nil
}
