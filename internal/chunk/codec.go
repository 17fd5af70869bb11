package chunk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// Stored object format. Every chunk object (in the blob store and in the
// Cache) is one format byte followed by the payload:
//
//	0x00 formatRaw:   the chunk's bytes as they are
//	0x01 formatZstd:  one zstd frame that decodes to the chunk's bytes
//	0x02 formatPages: a bitmap of the chunk's non-zero 4 KiB pages (bit i of
//	                  byte i/8 for page i), then those pages in order; zero
//	                  pages are not stored (a delta's XOR is mostly zero pages)
//
// The object key is derived from the SHA-256 of the UNCOMPRESSED bytes, so a
// chunk written raw by one Store and zstd by another dedups to one object;
// readers dispatch on the format byte and always verify the decoded bytes
// against the key's hash. A compressed payload is only kept when it saves at
// least 1/32 of the chunk, so incompressible data (random, already compressed)
// costs no decompression on restore.
const (
	formatRaw   byte = 0x00
	formatZstd  byte = 0x01
	formatPages byte = 0x02
)

// pageLen is the unit formatPages leaves out when zero.
const pageLen = 4096

// Compression settings for Config.Compression.
const (
	CompressionNone = "none"
	CompressionZstd = "zstd"
)

// codec encodes and decodes chunk objects. One zstd Encoder and one Decoder
// serve every chunk (their EncodeAll/DecodeAll keep internal pools of
// per-goroutine state), so nothing is allocated per chunk.
type codec struct {
	enc *zstd.Encoder // nil when compression is off
	dec *zstd.Decoder
}

// newCodec sizes the codec's internal pools to min(parallel, GOMAXPROCS):
// (de)compression is CPU-bound, so more state would only cost memory (about
// 5 MiB per encoder/decoder pair at 2 MiB chunks in low-memory mode).
func newCodec(compression string, parallel int) (*codec, error) {
	c := &codec{}
	parallel = max(1, min(parallel, runtime.GOMAXPROCS(0)))
	switch compression {
	case CompressionNone:
	case CompressionZstd:
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(parallel),
			zstd.WithLowerEncoderMem(true),
			zstd.WithEncoderCRC(false)) // the SHA-256 check covers integrity
		if err != nil {
			return nil, fmt.Errorf("create zstd encoder: %w", err)
		}
		c.enc = enc
	default:
		return nil, fmt.Errorf("compression %q: want %q or %q", compression, CompressionNone, CompressionZstd)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(parallel),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderMaxMemory(uint64(MaxChunkSize)))
	if err != nil {
		return nil, fmt.Errorf("create zstd decoder: %w", err)
	}
	c.dec = dec
	return c, nil
}

func (c *codec) close() {
	if c.enc != nil {
		_ = c.enc.Close() // EncodeAll-only use: Close just releases state
	}
	c.dec.Close()
}

// encode appends the object for data to dst[:0] and returns it. Without
// compression, a chunk with zero pages is stored without them.
func (c *codec) encode(data, dst []byte) []byte {
	dst = append(dst[:0], formatRaw)
	if c.enc == nil {
		if out, ok := encodePages(data, dst); ok {
			return out
		}
		return append(dst[:1], data...)
	}
	dst[0] = formatZstd
	dst = c.enc.EncodeAll(data, dst)
	if len(dst)-1 > len(data)-len(data)/32 {
		dst = append(dst[:0], formatRaw)
		dst = append(dst, data...)
	}
	return dst
}

var errBadObject = errors.New("malformed chunk object")

// decode decodes obj (into dst, whose capacity must be at least want, when
// compressed; a raw payload is returned in place) and checks the length and
// the SHA-256 against hash. Failures wrap ErrCorrupt.
func (c *codec) decode(obj, dst []byte, want int64, hash string) ([]byte, error) {
	if len(obj) == 0 {
		return nil, fmt.Errorf("%w: %w: empty object", ErrCorrupt, errBadObject)
	}
	var data []byte
	switch obj[0] {
	case formatRaw:
		data = obj[1:]
	case formatZstd:
		var err error
		data, err = c.dec.DecodeAll(obj[1:], dst[:0:want])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", ErrCorrupt, err)
		}
	case formatPages:
		var err error
		if data, err = decodePages(obj[1:], dst, want); err != nil {
			return nil, fmt.Errorf("%w: %w: %w", ErrCorrupt, errBadObject, err)
		}
	default:
		return nil, fmt.Errorf("%w: %w: unknown format byte %#x", ErrCorrupt, errBadObject, obj[0])
	}
	if int64(len(data)) != want {
		return nil, fmt.Errorf("%w: decoded %d bytes, want %d", ErrCorrupt, len(data), want)
	}
	if got := hashHex(sha256.Sum256(data)); got != hash {
		return nil, fmt.Errorf("%w: sha256 of content is %s", ErrCorrupt, got)
	}
	return data, nil
}

// maxObjectLen bounds a stored object for a chunk of n bytes: raw plus the
// format byte is the largest encoding written.
func maxObjectLen(n int64) int64 { return n + 1 }

// isZero reports whether b is all zero, comparing 8-byte words (eight at a
// time) after checking the first word, so non-zero data exits at once.
func isZero(b []byte) bool {
	for len(b) >= 64 {
		w := binary.LittleEndian.Uint64(b) | binary.LittleEndian.Uint64(b[8:]) |
			binary.LittleEndian.Uint64(b[16:]) | binary.LittleEndian.Uint64(b[24:]) |
			binary.LittleEndian.Uint64(b[32:]) | binary.LittleEndian.Uint64(b[40:]) |
			binary.LittleEndian.Uint64(b[48:]) | binary.LittleEndian.Uint64(b[56:])
		if w != 0 {
			return false
		}
		b = b[64:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// bytesReader is a reader over b (a Put body).
func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// encodePages appends the formatPages object of data to dst[:0], or reports
// false when leaving out its zero pages would not save 1/32 of it.
func encodePages(data, dst []byte) ([]byte, bool) {
	pages := (len(data) + pageLen - 1) / pageLen
	bitmap := (pages + 7) / 8
	size := 1 + bitmap
	for i := range pages {
		if p := page(data, i); !isZero(p) {
			size += len(p)
		}
	}
	if size > len(data)+1-len(data)/32 {
		return dst, false
	}
	dst = append(dst[:0], formatPages)
	dst = append(dst, make([]byte, bitmap)...)
	for i := range pages {
		if p := page(data, i); !isZero(p) {
			dst[1+i/8] |= 1 << (i % 8)
			dst = append(dst, p...)
		}
	}
	return dst, true
}

// decodePages rebuilds want bytes from a formatPages payload into dst.
func decodePages(payload, dst []byte, want int64) ([]byte, error) {
	if int64(cap(dst)) < want {
		dst = make([]byte, want)
	}
	data := dst[:want]
	pages := (len(data) + pageLen - 1) / pageLen
	bitmap := (pages + 7) / 8
	if len(payload) < bitmap {
		return nil, fmt.Errorf("pages object of %d bytes has no room for its %d-byte bitmap", len(payload), bitmap)
	}
	rest := payload[bitmap:]
	for i := range pages {
		p := page(data, i)
		if payload[i/8]&(1<<(i%8)) == 0 {
			clear(p)
			continue
		}
		if len(rest) < len(p) {
			return nil, fmt.Errorf("pages object ends inside page %d", i)
		}
		copy(p, rest[:len(p)])
		rest = rest[len(p):]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("pages object has %d bytes after its last page", len(rest))
	}
	return data, nil
}

// page is page i of data (the last one may be short).
func page(data []byte, i int) []byte {
	return data[i*pageLen : min((i+1)*pageLen, len(data))]
}
