package chunk

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
)

func TestPagesFormat(t *testing.T) {
	t.Parallel()
	c, err := newCodec(CompressionNone, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	filled := func(n int, pages ...int) []byte {
		b := make([]byte, n)
		for _, p := range pages {
			for i := p * pageLen; i < min((p+1)*pageLen, n); i++ {
				b[i] = byte(i*7 + p + 1)
			}
		}
		return b
	}
	tests := []struct {
		name       string
		data       []byte
		wantFormat byte
	}{
		{"one page of sixteen", filled(64<<10, 3), formatPages},
		{"first and last", filled(64<<10, 0, 15), formatPages},
		{"short last page", filled(64<<10-100, 15), formatPages},
		{"all pages", filled(64<<10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), formatRaw},
		{"fifteen of sixteen saves 1/16", filled(64<<10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14), formatPages},
		{"single short page", filled(100, 0), formatRaw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obj := c.encode(tt.data, nil)
			if obj[0] != tt.wantFormat {
				t.Fatalf("format %#x, want %#x", obj[0], tt.wantFormat)
			}
			h := hashHex(sha256.Sum256(tt.data))
			got, err := c.decode(obj, make([]byte, 64<<10), int64(len(tt.data)), h)
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Fatalf("decode: %v (equal %v)", err, bytes.Equal(got, tt.data))
			}
		})
	}
	// Damaged pages objects are refused, never misread.
	data := filled(64<<10, 2, 9)
	h := hashHex(sha256.Sum256(data))
	good := c.encode(data, nil)
	for name, obj := range map[string][]byte{
		"truncated page":  good[:len(good)-1],
		"extra byte":      append(append([]byte(nil), good...), 0),
		"bitmap bit lost": func() []byte { b := append([]byte(nil), good...); b[1] &^= 1 << 2; return b }(),
		"no bitmap":       {formatPages, 1},
	} {
		if _, err := c.decode(obj, make([]byte, 64<<10), int64(len(data)), h); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", name, err)
		}
	}
}
