package imagetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// BombKind is how a Bomb layer expands.
type BombKind string

// The kinds of Bomb. Each layer starts with /bin and a /bin/sh stand-in.
const (
	// BombHugeFile: one file of all the zeros; its header alone says it is too large.
	BombHugeFile BombKind = "huge-file"
	// BombZeroFiles: files of 64 MiB of zeros each: every one fits a tree, together
	// they do not.
	BombZeroFiles BombKind = "zero-files"
	// BombTrailingZeros: the zeros after the end of the archive, where no tar reader
	// looks but a digest check reads.
	BombTrailingZeros BombKind = "trailing-zeros"
	// BombZstdZeroFiles: BombZeroFiles as zstd, which packs zeros far tighter.
	BombZstdZeroFiles BombKind = "zstd-zero-files"
)

// BombKinds lists every BombKind.
func BombKinds() []BombKind {
	return []BombKind{BombHugeFile, BombZeroFiles, BombTrailingZeros, BombZstdZeroFiles}
}

// bombMember is how many zeros one compressed member (gzip) or frame (zstd) holds:
// the same bytes repeated give any length, so a bomb of many GiB takes no longer to
// make than its compressed size to write.
const bombMember = 16 << 20

// bombFile is the size of each file of BombZeroFiles.
const bombFile = 64 << 20

// Bomb is a one-layer image whose layer expands to about expanded bytes of zeros
// (rounded up to whole members) from about a thousandth of that (gzip; zstd far
// less). The compressed blob is written to a file under t.TempDir as a stream of
// concatenated gzip members (zstd frames), each valid with its own checksum. Its
// config's diff_id is not the stream's (hashing many GiB would take longer than the
// test; an attacker sets it anyway): a puller that read the whole layer would fail
// it as corrupt, so a refusal for its size is a refusal before the end.
func Bomb(t testing.TB, kind BombKind, expanded int64) v1.Image {
	t.Helper()
	zstdKind := kind == BombZstdZeroFiles
	w := newBombWriter(t, zstdKind)
	w.tar(hdr("bin/", tar.TypeDir, 0), hdr("bin/sh", tar.TypeReg, 0))
	switch kind {
	case BombHugeFile:
		w.tar(hdr("zeros", tar.TypeReg, expanded))
		w.zeros(expanded + (512-expanded%512)%512 + 1024) // content, padding, the end of the archive
	case BombZeroFiles, BombZstdZeroFiles:
		for i := int64(0); i*bombFile < expanded; i++ {
			w.tar(hdr(fmt.Sprintf("zeros/%06d", i), tar.TypeReg, bombFile))
			w.zeros(bombFile)
		}
		w.zeros(1024)
	case BombTrailingZeros:
		w.zeros(1024 + expanded)
	default:
		t.Fatalf("imagetest: unknown bomb kind %q", kind)
	}
	l := w.layer()
	t.Logf("imagetest: %s bomb: %d KiB compressed, %d MiB expanded", kind, w.size>>10, w.expanded>>20)
	return Image(t, shellConfig(), l)
}

func hdr(name string, typ byte, size int64) *tar.Header {
	mode := int64(0o644)
	if typ == tar.TypeDir || name == "bin/sh" {
		mode = 0o755
	}
	return &tar.Header{Name: name, Typeflag: typ, Size: size, Mode: mode, ModTime: ModTime(), Format: tar.FormatPAX}
}

// bombWriter writes a layer blob as compressed members to a file.
type bombWriter struct {
	t        testing.TB
	f        *os.File
	zstd     bool
	enc      *zstd.Encoder
	zero     []byte // one member of bombMember zeros, compressed
	digest   *countingHash
	expanded int64
	size     int64
}

func newBombWriter(t testing.TB, zstdKind bool) *bombWriter {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "bomb.blob"))
	if err != nil {
		t.Fatalf("imagetest: create bomb blob: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	w := &bombWriter{t: t, f: f, zstd: zstdKind, digest: &countingHash{h: sha256.New()}}
	if zstdKind {
		if w.enc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			t.Fatalf("imagetest: zstd encoder: %v", err)
		}
		t.Cleanup(func() { _ = w.enc.Close() })
	}
	w.zero = w.member(make([]byte, bombMember))
	return w
}

// member compresses b as one gzip member or zstd frame.
func (w *bombWriter) member(b []byte) []byte {
	if w.zstd {
		return w.enc.EncodeAll(b, nil)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err == nil {
		_, err = zw.Write(b)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		w.t.Fatalf("imagetest: compress bomb member: %v", err)
	}
	return buf.Bytes()
}

func (w *bombWriter) write(compressed []byte, expanded int64) {
	if _, err := io.MultiWriter(w.f, w.digest).Write(compressed); err != nil {
		w.t.Fatalf("imagetest: write bomb blob: %v", err)
	}
	w.size += int64(len(compressed))
	w.expanded += expanded
}

// tar writes the header blocks of hdrs; only the last may have content, which the
// caller writes as zeros (then its padding, zeros too).
func (w *bombWriter) tar(hdrs ...*tar.Header) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf) // never closed: the stream goes on after it
	for i, h := range hdrs {
		if h.Size != 0 && i != len(hdrs)-1 {
			w.t.Fatalf("imagetest: bomb header %q has content but is not last", h.Name)
		}
		if err := tw.WriteHeader(h); err != nil {
			w.t.Fatalf("imagetest: bomb tar header: %v", err)
		}
	}
	w.write(w.member(buf.Bytes()), int64(buf.Len()))
}

// zeros writes n zero bytes: whole members, then one of the rest.
func (w *bombWriter) zeros(n int64) {
	for ; n >= bombMember; n -= bombMember {
		w.write(w.zero, bombMember)
	}
	if n > 0 {
		w.write(w.member(make([]byte, n)), n)
	}
}

// layer is the written blob as a layer.
func (w *bombWriter) layer() v1.Layer {
	mt := types.OCILayer
	if w.zstd {
		mt = types.OCILayerZStd
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", w.digest.h.Sum(nil))}
	bogus := sha256.Sum256([]byte("a bomb's diff_id is not its stream's"))
	l, err := partial.CompressedToLayer(&blobLayer{path: w.f.Name(), digest: digest, size: w.size, mt: mt,
		diffID: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", bogus)}})
	if err != nil {
		w.t.Fatalf("imagetest: bomb layer: %v", err)
	}
	return l
}

// blobLayer is a compressed layer blob in a file whose digests are known.
type blobLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
	mt             types.MediaType
}

func (l *blobLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)                { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return l.mt, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

// EntriesKind is what the entries of a ManyEntries layer are.
type EntriesKind string

const (
	// EmptyFiles: empty files, 1000 to a directory (each one an inode).
	EmptyFiles EntriesKind = "empty-files"
	// Whiteouts: whiteouts of names no lower layer has (nothing on disk at all).
	Whiteouts EntriesKind = "whiteouts"
)

// ManyEntries is a one-layer image of /bin/sh and n entries of kind, written
// streaming (tar, gzip, its digests) to a file under t.TempDir: the test's memory
// does not grow with n; the blob is about 8 bytes per entry.
func ManyEntries(t testing.TB, n int, kind EntriesKind) v1.Image {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "entries.tar.gz"))
	if err != nil {
		t.Fatalf("imagetest: create layer: %v", err)
	}
	defer f.Close()
	compressed, uncompressed := &countingHash{h: sha256.New()}, &countingHash{h: sha256.New()}
	zw, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed), gzip.BestSpeed)
	if err != nil {
		t.Fatalf("imagetest: gzip: %v", err)
	}
	bw := bufio.NewWriterSize(io.MultiWriter(zw, uncompressed), 1<<20)
	tmpl := ustarTemplate(t)
	block := make([]byte, 512)
	put := func(name string, mode int64) {
		copy(block, tmpl)
		copy(block[0:100], name)
		copy(block[100:108], fmt.Sprintf("%07o\x00", mode))
		copy(block[148:156], "        ")
		var sum int64
		for _, c := range block {
			sum += int64(c)
		}
		copy(block[148:156], fmt.Sprintf("%06o\x00 ", sum))
		if _, err := bw.Write(block); err != nil {
			t.Fatalf("imagetest: write entry %s: %v", name, err)
		}
	}
	put("bin/sh", 0o755) // empty, executable; its directory is implicit
	for i := range n {
		switch kind {
		case EmptyFiles:
			put(fmt.Sprintf("d%04d/f%03d", i/1000, i%1000), 0o644)
		case Whiteouts:
			put(fmt.Sprintf("w/.wh.%07d", i), 0o644)
		default:
			t.Fatalf("imagetest: unknown entries kind %q", kind)
		}
	}
	_, err = bw.Write(make([]byte, 1024)) // the end of the archive
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatalf("imagetest: write layer: %v", err)
	}
	l, err := partial.CompressedToLayer(&blobLayer{path: f.Name(), size: compressed.n, mt: types.OCILayer,
		digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", compressed.h.Sum(nil))},
		diffID: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", uncompressed.h.Sum(nil))}})
	if err != nil {
		t.Fatalf("imagetest: layer: %v", err)
	}
	t.Logf("imagetest: %d %s: %d KiB compressed, %d MiB uncompressed", n, kind, compressed.n>>10, uncompressed.n>>20)
	return Image(t, shellConfig(), l)
}

// ustarTemplate is the header block archive/tar writes for an empty regular file
// with an empty name: ManyEntries fills in each name, mode and checksum (tar's own
// rules: the checksum sums the block with its field as spaces).
func ustarTemplate(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := tw.WriteHeader(&tar.Header{Name: "x", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: ModTime(), Format: tar.FormatUSTAR})
	if err != nil || buf.Len() != 512 {
		t.Fatalf("imagetest: tar template: %d bytes, %v", buf.Len(), err)
	}
	b := buf.Bytes()
	clear(b[0:100])
	return b
}
