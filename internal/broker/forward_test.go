package broker

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"testing"
)

func answer(enc string, body []byte) *http.Response {
	h := http.Header{}
	if enc != "" {
		h.Set("Content-Encoding", enc)
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
}

func gzipped(b []byte) []byte {
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(b)
	w.Close()
	return z.Bytes()
}

// TestDecodedIsBounded: a gzip answer that decodes past MaxDecodedBytes
// fails with errTooLarge once it gets there; other encodings are refused.
func TestDecodedIsBounded(t *testing.T) {
	t.Parallel()
	b := &Broker{cfg: Config{MaxDecodedBytes: 1 << 16}}
	r, err := b.decoded(answer("gzip", gzipped(make([]byte, 1<<20))))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, r); !errors.Is(err, errTooLarge) || n != 1<<16 {
		t.Fatalf("read %d: %v, want 64 KiB then errTooLarge", n, err)
	}
	for _, enc := range []string{"br", "gzip, gzip", "compress"} {
		if _, err := b.decoded(answer(enc, nil)); err == nil {
			t.Errorf("Content-Encoding %q taken", enc)
		}
	}
}

// FuzzDecodedAnswer: whatever an upstream sends as a gzip or deflate body,
// decoding it never yields more than the bound.
func FuzzDecodedAnswer(f *testing.F) {
	f.Add([]byte("plain"), "")
	f.Add(gzipped([]byte("hello")), "gzip")
	f.Add(gzipped(make([]byte, 5000)), "x-gzip")
	f.Add([]byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01}, "deflate")
	f.Add([]byte{0x01, 0x00, 0x00, 0xff, 0xff}, "deflate")
	b := &Broker{cfg: Config{MaxDecodedBytes: 4096}}
	f.Fuzz(func(t *testing.T, body []byte, enc string) {
		r, err := b.decoded(answer(enc, body))
		if err != nil {
			return
		}
		_, decoding := r.(*boundedReader)
		if n, _ := io.Copy(io.Discard, r); decoding && n > 4096 {
			t.Fatalf("decoded %d bytes of a %q answer, bound 4096", n, enc)
		}
	})
}
