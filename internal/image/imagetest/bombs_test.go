package imagetest_test

import (
	"archive/tar"
	"bufio"
	"errors"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/engrams/engrams/internal/image/imagetest"
)

// layerStream counts what img's only layer holds: tar entries, content bytes and
// the uncompressed bytes after the end of the archive.
func layerStream(t *testing.T, img v1.Image) (entries int, content, trailing int64) {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers %v, %v", ls, err)
	}
	rc, err := ls[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	var r io.Reader
	if magic, _ := br.Peek(2); magic[0] == 0x1f {
		zr, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	} else {
		zr, err := zstd.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("entry %d: %v", entries, err)
		}
		entries++
		n, err := io.Copy(io.Discard, tr)
		if err != nil || n != h.Size {
			t.Fatalf("%s: %d of %d bytes, %v", h.Name, n, h.Size, err)
		}
		content += n
	}
	trailing, err = io.Copy(io.Discard, r)
	if err != nil {
		t.Fatalf("after the archive: %v", err)
	}
	return entries, content, trailing
}

// The generators make what they say: valid streams (every gzip member and zstd
// frame checked by its reader) of the promised entries and zeros.
func TestGenerators(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name                  string
		img                   func(t *testing.T) v1.Image
		entries               int
		content, trailingOver int64
	}{
		{"huge file", func(t *testing.T) v1.Image { return imagetest.Bomb(t, imagetest.BombHugeFile, 40*mib+3) }, 3, 40*mib + 3, 0},
		{"zero files", func(t *testing.T) v1.Image { return imagetest.Bomb(t, imagetest.BombZeroFiles, 100*mib) }, 4, 128 * mib, 0},
		{"zstd zero files", func(t *testing.T) v1.Image { return imagetest.Bomb(t, imagetest.BombZstdZeroFiles, 100*mib) }, 4, 128 * mib, 0},
		{"trailing zeros", func(t *testing.T) v1.Image { return imagetest.Bomb(t, imagetest.BombTrailingZeros, 40*mib) }, 2, 0, 40 * mib},
		{"empty files", func(t *testing.T) v1.Image { return imagetest.ManyEntries(t, 2500, imagetest.EmptyFiles) }, 2501, 0, 0},
		{"whiteouts", func(t *testing.T) v1.Image { return imagetest.ManyEntries(t, 2500, imagetest.Whiteouts) }, 2501, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entries, content, trailing := layerStream(t, tc.img(t))
			if entries != tc.entries || content != tc.content || trailing < tc.trailingOver {
				t.Errorf("%d entries, %d content bytes, %d after; want %d, %d, at least %d",
					entries, content, trailing, tc.entries, tc.content, tc.trailingOver)
			}
		})
	}
}
