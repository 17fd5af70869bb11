package vmimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/engrams/engrams/internal/testutil"
)

// fakeBzImage builds a minimal bzImage: setup header, version string and
// payload; setup_sects is 1, so the protected-mode part starts at 1024.
func fakeBzImage(t *testing.T, payload []byte) []byte {
	t.Helper()
	bz := make([]byte, 1024+64)
	bz[offSetupSects] = 1
	copy(bz[offHeaderMagic:], "HdrS")
	ver := "6.1.0-test (builder@x) #1 SMP"
	binary.LittleEndian.PutUint16(bz[offKernelVer:], uint16(0x300-0x200))
	copy(bz[0x300:], ver+"\x00")
	binary.LittleEndian.PutUint32(bz[offPayloadOff:], 64)
	binary.LittleEndian.PutUint32(bz[offPayloadLen:], uint32(len(payload)))
	return append(bz, payload...)
}

func lz4Legacy(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(lz4.LegacyOption(true)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	return binary.LittleEndian.AppendUint32(out, uint32(len(data))) // size_append
}

func gzipped(t *testing.T, data []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(data)
	w.Close()
	return buf.Bytes()
}

func TestExtractVmlinux(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("\x7fELF kernel text "), 100000)
	tests := []struct {
		name    string
		payload []byte
		wantErr bool
	}{
		{"lz4 legacy", lz4Legacy(t, data), false},
		{"gzip", gzipped(t, data), false},
		{"xz unsupported", append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, data[:100]...), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bz := fakeBzImage(t, tt.payload)
			if v, err := KernelVersion(bz); err != nil || v != "6.1.0-test" {
				t.Errorf("version = %q, %v", v, err)
			}
			var out bytes.Buffer
			err := ExtractVmlinux(bz, &out)
			if tt.wantErr {
				if err == nil {
					t.Error("want an error")
				}
				return
			}
			if err != nil || !bytes.Equal(out.Bytes(), data) {
				t.Errorf("extract: %d bytes, %v", out.Len(), err)
			}
		})
	}
	if _, err := Payload([]byte("not a kernel")); err == nil {
		t.Error("Payload of garbage: want an error")
	}
}

func TestHasNote(t *testing.T) {
	t.Parallel()
	note := func(name string, typ uint32, desc []byte) []byte {
		var b []byte
		b = binary.LittleEndian.AppendUint32(b, uint32(len(name)+1))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		n := append([]byte(name), 0)
		for len(n)%4 != 0 {
			n = append(n, 0)
		}
		b = append(b, n...)
		return append(b, desc...)
	}
	notes := append(note("GNU", 3, make([]byte, 20)), note("Xen", 18, make([]byte, 8))...)
	if !hasNote(notes, binary.LittleEndian, "Xen", 18) {
		t.Error("PVH note not found")
	}
	if hasNote(note("Xen", 17, make([]byte, 8)), binary.LittleEndian, "Xen", 18) {
		t.Error("wrong type matched")
	}
}

// TestKernelFromHost extracts the host's distribution kernel when present.
func TestKernelFromHost(t *testing.T) {
	t.Parallel()
	m, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(m) == 0 {
		testutil.SkipOrFail(t, "no /boot/vmlinuz-* (scripts/install-deps.sh)")
	}
	b, err := New(Config{CacheDir: t.TempDir()}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	p, v, err := b.Kernel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyPVH(p); err != nil {
		t.Error(err)
	}
	p2, _, err := b.Kernel(context.Background())
	if err != nil || p2 != p {
		t.Errorf("second call not cached: %s vs %s (%v)", p2, p, err)
	}
	if _, err := os.Stat(filepath.Join("/lib/modules", v, "modules.dep")); err != nil {
		t.Errorf("kernel version %q has no modules: %v", v, err)
	}
}
