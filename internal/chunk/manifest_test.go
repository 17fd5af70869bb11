package chunk

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const (
	h1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h2 = "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h3 = "2123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Manifest
		wantErr string // substring; empty means success
	}{
		{"empty file", `{"version":1,"chunk_size":4096,"size":0,"chunks":[]}`,
			Manifest{Version: 1, ChunkSize: 4096, Chunks: []Ref{}}, ""},
		{"empty file, null chunks", `{"version":1,"chunk_size":4096,"size":0,"chunks":null}`,
			Manifest{Version: 1, ChunkSize: 4096}, ""},
		{"two chunks", `{"version":1,"role":"memory","chunk_size":4096,"size":4097,"chunks":["` + h1 + `","zero"]}`,
			Manifest{Version: 1, Role: "memory", ChunkSize: 4096, Size: 4097, Chunks: []Ref{{Hash: h1}, {}}}, ""},
		{"delta ref", `{"version":2,"chunk_size":4096,"size":4096,"chunks":["` + h1 + `=` + h2 + `^` + h3 + `"]}`,
			Manifest{Version: 2, ChunkSize: 4096, Size: 4096, Chunks: []Ref{{Hash: h1, Base: h2, Delta: h3}}}, ""},
		{"delta ref in version 1", `{"version":1,"chunk_size":4096,"size":4096,"chunks":["` + h1 + `=` + h2 + `^` + h3 + `"]}`, Manifest{}, "chunk 0"},
		{"delta ref without delta", `{"version":2,"chunk_size":4096,"size":4096,"chunks":["` + h1 + `=` + h2 + `"]}`, Manifest{}, "invalid manifest"},
		{"delta on itself", `{"version":2,"chunk_size":4096,"size":4096,"chunks":["` + h1 + `=` + h1 + `^` + h3 + `"]}`, Manifest{}, "invalid manifest"},
		{"too few chunks", `{"version":1,"chunk_size":4096,"size":4097,"chunks":["zero"]}`, Manifest{}, "1 chunks for size 4097"},
		{"too many chunks", `{"version":1,"chunk_size":4096,"size":1,"chunks":["zero","zero"]}`, Manifest{}, "2 chunks for size 1"},
		{"missing chunks", `{"version":1,"chunk_size":4096,"size":1}`, Manifest{}, "missing chunks"},
		{"bad hex", `{"version":1,"chunk_size":4096,"size":1,"chunks":["` + strings.Repeat("g", 64) + `"]}`, Manifest{}, "not a lowercase hex"},
		{"upper hex", `{"version":1,"chunk_size":4096,"size":1,"chunks":["` + strings.ToUpper(h1) + `"]}`, Manifest{}, "not a lowercase hex"},
		{"short hash", `{"version":1,"chunk_size":4096,"size":1,"chunks":["abcd"]}`, Manifest{}, "not a lowercase hex"},
		{"chunk ref not a string", `{"version":1,"chunk_size":4096,"size":1,"chunks":[7]}`, Manifest{}, "invalid manifest"},
		{"negative size", `{"version":1,"chunk_size":4096,"size":-1,"chunks":[]}`, Manifest{}, "negative size"},
		{"chunk size zero", `{"version":1,"chunk_size":0,"size":0,"chunks":[]}`, Manifest{}, "chunk size 0"},
		{"chunk size unaligned", `{"version":1,"chunk_size":5000,"size":0,"chunks":[]}`, Manifest{}, "chunk size 5000"},
		{"wrong version", `{"version":3,"chunk_size":4096,"size":0,"chunks":[]}`, Manifest{}, "version 3"},
		{"unknown field", `{"version":1,"chunk_size":4096,"size":0,"chunks":[],"extra":1}`, Manifest{}, "unknown field"},
		{"trailing data", `{"version":1,"chunk_size":4096,"size":0,"chunks":[]} {}`, Manifest{}, "trailing data"},
		{"not json", `chunks`, Manifest{}, "invalid manifest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Decode([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v: want ErrInvalidManifest containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    Manifest
	}{
		{"no version", Manifest{ChunkSize: 4096}},
		{"count", Manifest{Version: 1, ChunkSize: 4096, Size: 1}},
		{"hash", Manifest{Version: 1, ChunkSize: 4096, Size: 1, Chunks: []Ref{{Hash: "xyz"}}}},
		{"half a delta", Manifest{Version: 2, ChunkSize: 4096, Size: 1, Chunks: []Ref{{Hash: h1, Base: h1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tc.m.Encode(); !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("error %v, want ErrInvalidManifest", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"chunk_size":4096,"size":4097,"chunks":["` + h1 + `","zero"]}`))
	f.Add([]byte(`{"version":1,"name":"vm.mem","role":"memory","chunk_size":2097152,"size":0,"chunks":[]}`))
	f.Add([]byte(`{"version":1,"chunk_size":4096,"size":1,"chunks":["zero"]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("error %v does not wrap ErrInvalidManifest", err)
			}
			return
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if m2.Size != m.Size || m2.ChunkSize != m.ChunkSize || len(m2.Chunks) != len(m.Chunks) ||
			m2.Name != m.Name || m2.Role != m.Role {
			t.Fatalf("round trip changed the manifest: %+v vs %+v", m, m2)
		}
		for i := range m.Chunks {
			if m.Chunks[i] != m2.Chunks[i] {
				t.Fatalf("chunk %d changed", i)
			}
		}
	})
}
